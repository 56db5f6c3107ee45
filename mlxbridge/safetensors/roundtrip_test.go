package safetensors

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// withLength prefixes a header with its 8-byte little-endian length and
// appends the data region.
func withLength(header string, data ...byte) []byte {
	n := len(header)
	out := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), 0, 0, 0, 0}
	return append(append(out, header...), data...)
}

// fill returns n bytes of a recognisable pattern.
func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func encode(t *testing.T, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, meta); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

// checkTensors asserts that f holds exactly the given tensors.
func checkTensors(t *testing.T, f interface {
	Names() []string
	Info(string) (TensorInfo, bool)
	Data(string) ([]byte, error)
}, want []Tensor) {
	t.Helper()
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.Name)
	}
	slices.Sort(wantNames)
	if got := f.Names(); !slices.Equal(got, wantNames) {
		t.Fatalf("Names() = %q, want %q", got, wantNames)
	}
	for _, w := range want {
		info, ok := f.Info(w.Name)
		if !ok {
			t.Fatalf("Info(%q) missing", w.Name)
		}
		if info.DType != w.DType || !slices.Equal(info.Shape, w.Shape) || info.Name != w.Name {
			t.Errorf("Info(%q) = %+v, want dtype %s shape %v", w.Name, info, w.DType, w.Shape)
		}
		data, err := f.Data(w.Name)
		if err != nil {
			t.Fatalf("Data(%q): %v", w.Name, err)
		}
		if !bytes.Equal(data, w.Data) {
			t.Errorf("Data(%q) = %x, want %x", w.Name, data, w.Data)
		}
	}
}

func TestRoundTripEveryDType(t *testing.T) {
	for _, dt := range DTypes() {
		t.Run(string(dt), func(t *testing.T) {
			tensors := []Tensor{
				{Name: "w", DType: dt, Shape: []int{2, 3}, Data: fill(6*dt.Size(), 1)},
				{Name: "scalar", DType: dt, Shape: []int{}, Data: fill(dt.Size(), 9)},
				{Name: "empty", DType: dt, Shape: []int{4, 0}, Data: []byte{}},
			}
			f, err := Parse(encode(t, tensors, nil))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			checkTensors(t, f, tensors)
			if got := f.Metadata(); got != nil {
				t.Errorf("Metadata() = %v, want nil", got)
			}
		})
	}
}

func TestRoundTripMetadata(t *testing.T) {
	meta := map[string]string{"format": "mlx", "quote\"and\\slash": "line\nbreak\x01<&>", "ünïcode": "✓", "": ""}
	tensors := []Tensor{{Name: "name with \"quotes\"\t", DType: DTypeF16, Shape: []int{1}, Data: []byte{0, 0x3c}}}
	f, err := Parse(encode(t, tensors, meta))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := f.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("Metadata() = %q, want %q", got, meta)
	}
	checkTensors(t, f, tensors)
}

func TestRoundTripNoTensors(t *testing.T) {
	raw := encode(t, nil, map[string]string{"k": "v"})
	f, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := f.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0", got)
	}
}

// golden is a file written out by hand, byte by byte, in the reference
// writer's layout: widest dtype first, then by name; header padded to 200.
var golden = withLength(`{"__metadata__":{"format":"pt"},`+
	`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+
	`"c":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},`+
	`"b":{"dtype":"U8","shape":[3],"data_offsets":[10,13]}}`+"       ",
	0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, // a = [1, -2]
	0x80, 0x3f, // c = 1
	0x01, 0x02, 0x03, // b
)

var goldenTensors = []Tensor{
	{Name: "b", DType: DTypeU8, Shape: []int{3}, Data: []byte{1, 2, 3}},
	{Name: "c", DType: DTypeBF16, Shape: []int{}, Data: []byte{0x80, 0x3f}},
	{Name: "a", DType: DTypeF32, Shape: []int{2}, Data: []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}},
}

func TestGolden(t *testing.T) {
	if got, want := golden[0], byte(200); got != want {
		t.Fatalf("golden header length byte = %d, want %d", got, want)
	}
	f, err := Parse(golden)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantInfos := []TensorInfo{
		{Name: "a", DType: DTypeF32, Shape: []int{2}, Begin: 0, End: 8},
		{Name: "b", DType: DTypeU8, Shape: []int{3}, Begin: 10, End: 13},
		{Name: "c", DType: DTypeBF16, Shape: []int{}, Begin: 8, End: 10},
	}
	for _, want := range wantInfos {
		if got, _ := f.Info(want.Name); !reflect.DeepEqual(got, want) {
			t.Errorf("Info(%q) = %+v, want %+v", want.Name, got, want)
		}
	}
	checkTensors(t, f, goldenTensors)
	if got, want := f.Metadata(), map[string]string{"format": "pt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Metadata() = %v, want %v", got, want)
	}
	vals, err := Float32s(DTypeF32, mustData(t, f, "a"))
	if err != nil || !slices.Equal(vals, []float32{1, -2}) {
		t.Errorf("Float32s(a) = %v, %v, want [1 -2]", vals, err)
	}
	if got := encode(t, goldenTensors, map[string]string{"format": "pt"}); !bytes.Equal(got, golden) {
		t.Errorf("Encode =\n%q\nwant\n%q", got, golden)
	}
}

// TestEncodeMatchesReference checks Encode against files the reference
// writer produces for the same input.
func TestEncodeMatchesReference(t *testing.T) {
	f32s := func(v ...float32) []byte { b, _ := EncodeFloat32s(DTypeF32, v); return b }
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    []byte
	}{
		{"nothing", nil, nil, withLength("{}      ")},
		{"metadata only", nil, map[string]string{"framework": "pt"}, withLength(`{"__metadata__":{"framework":"pt"}}` + "     ")},
		{"header already aligned", []Tensor{{Name: "attn.0", DType: DTypeF32, Shape: []int{1, 2, 3}, Data: f32s(0, 1, 2, 3, 4, 5)}}, nil,
			withLength(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, f32s(0, 1, 2, 3, 4, 5)...)},
		{"header padded", []Tensor{{Name: "attn0", DType: DTypeF32, Shape: []int{1, 1, 2, 3}, Data: f32s(0, 1, 2, 3, 4, 5)}}, nil,
			withLength(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}`+"       ", f32s(0, 1, 2, 3, 4, 5)...)},
		{"widest first, then by name", []Tensor{
			{Name: "a", DType: DTypeU8, Shape: []int{1}, Data: []byte{1}},
			{Name: "b", DType: DTypeI32, Shape: []int{}, Data: []byte{2, 0, 0, 0}},
			{Name: "c", DType: DTypeF32, Shape: []int{}, Data: []byte{3, 0, 0, 0}},
			{Name: "d", DType: DTypeI64, Shape: []int{}, Data: []byte{4, 0, 0, 0, 0, 0, 0, 0}},
		}, nil, withLength(`{"d":{"dtype":"I64","shape":[],"data_offsets":[0,8]},`+
			`"c":{"dtype":"F32","shape":[],"data_offsets":[8,12]},`+
			`"b":{"dtype":"I32","shape":[],"data_offsets":[12,16]},`+
			`"a":{"dtype":"U8","shape":[1],"data_offsets":[16,17]}}`+"  ",
			4, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encode(t, tt.tensors, tt.meta); !bytes.Equal(got, tt.want) {
				t.Errorf("Encode =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestEncodeAligns checks every tensor's data starts at a multiple of its
// element size in the file, whatever the mix of dtypes.
func TestEncodeAligns(t *testing.T) {
	var tensors []Tensor
	for i, dt := range DTypes() {
		tensors = append(tensors, Tensor{Name: string(rune('z' - i)), DType: dt, Shape: []int{3}, Data: fill(3*dt.Size(), 0)})
	}
	raw := encode(t, tensors, map[string]string{"odd": "x"})
	f, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	start := int64(len(raw)) // the data region's offset in the file
	for _, tn := range tensors {
		start -= int64(len(tn.Data))
	}
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		if pos := start + info.Begin; pos%int64(info.DType.Size()) != 0 {
			t.Errorf("tensor %s (%s) starts at file offset %d, not a multiple of %d", name, info.DType, pos, info.DType.Size())
		}
	}
}

func mustData(t *testing.T, f *File, name string) []byte {
	t.Helper()
	d, err := f.Data(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWriteFileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "adapters.safetensors")
	tensors := []Tensor{
		{Name: "lora_a", DType: DTypeF32, Shape: []int{16, 4}, Data: fill(256, 3)},
		{Name: "lora_b", DType: DTypeBF16, Shape: []int{4, 16}, Data: fill(128, 5)},
	}
	meta := map[string]string{"rank": "4"}
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if err := WriteFile(path, tensors, meta); err != nil { // replaces in place
		t.Fatalf("second WriteFile: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries, want 1 (temp files left behind?)", len(entries))
	}
	f, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	checkTensors(t, f, tensors)
	if got := f.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("Metadata() = %v, want %v", got, meta)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.Data("lora_a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Data after Close: got %v, want ErrClosed", err)
	}
}

func TestWriteFileRefusesBadTensorAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	err := WriteFile(filepath.Join(dir, "x.safetensors"), []Tensor{{Name: "x", DType: DTypeF32, Shape: []int{2}, Data: []byte{1}}}, nil)
	if err == nil {
		t.Fatal("WriteFile succeeded with short data")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("folder holds %d entries, want 0", len(entries))
	}
}

func TestEncodeRefuses(t *testing.T) {
	ok := func(name string) Tensor { return Tensor{Name: name, DType: DTypeU8, Shape: []int{1}, Data: []byte{1}} }
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"short data", []Tensor{{Name: "x", DType: DTypeF32, Shape: []int{2}, Data: make([]byte, 7)}}, nil, "7 bytes of data, but F32[2] needs 8"},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, nil, "unknown dtype"},
		{"negative dim", []Tensor{{Name: "x", DType: DTypeU8, Shape: []int{-1}}}, nil, "negative dimension"},
		{"overflow", []Tensor{{Name: "x", DType: DTypeU8, Shape: []int{math.MaxInt, math.MaxInt, math.MaxInt}}}, nil, "overflows"},
		{"duplicate", []Tensor{ok("x"), ok("x")}, nil, "duplicate name"},
		{"duplicate with other dtype", []Tensor{ok("x"), {Name: "y", DType: DTypeF16, Shape: []int{}, Data: []byte{0, 0}}, {Name: "x", DType: DTypeF32, Shape: []int{}, Data: make([]byte, 4)}}, nil, "duplicate name"},
		{"reserved", []Tensor{ok("__metadata__")}, nil, "reserved"},
		{"bad utf-8 name", []Tensor{ok("\xff")}, nil, "not valid UTF-8"},
		{"bad utf-8 metadata", nil, map[string]string{"k": "\xff"}, "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Encode(&buf, tt.tensors, tt.meta)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Fatalf("Encode error = %v, want one mentioning %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Encode wrote %d bytes before failing, want 0", buf.Len())
			}
		})
	}
}

func TestLookupErrors(t *testing.T) {
	f, err := Parse(golden)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Info("nope"); ok {
		t.Error("Info(nope) found a tensor")
	}
	if _, err := f.Data("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Data(nope): got %v, want ErrNotFound", err)
	}
	info, _ := f.Info("a")
	info.Shape[0] = 99
	if again, _ := f.Info("a"); again.Shape[0] != 2 {
		t.Errorf("changing a returned shape changed the file's: got %d, want 2", again.Shape[0])
	}
}

func TestOpenErrorsNameThePath(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, withLength(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.safetensors")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{bad, empty, dir} {
		_, err := Open(path)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s) error = %v, want one naming the path", path, err)
		}
	}
	if _, err := Open(bad); !errors.Is(err, ErrFormat) {
		t.Errorf("Open(bad): got %v, want ErrFormat", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrFormat) {
		t.Errorf("Open(missing): got %v, want ErrNotExist and not ErrFormat", err)
	}
}
