package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"unicode/utf8"
)

func FuzzSafetensors(f *testing.F) {
	var seeds [][]byte
	add := func(tensors []Tensor, meta map[string]string) {
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, meta); err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	var all []Tensor
	for i, dt := range DTypes() {
		all = append(all, Tensor{Name: string(dt), DType: dt, Shape: []int{2, 1}, Data: fill(2*dt.Size(), byte(i))})
	}
	add(all, map[string]string{"format": "pt", "note": "seed"})
	add([]Tensor{{Name: "scalar", DType: DTypeF32, Shape: []int{}, Data: fill(4, 1)}, {Name: "empty", DType: DTypeBF16, Shape: []int{0, 4}}}, nil)
	add(goldenTensors, map[string]string{"format": "pt"})
	add(nil, nil)
	seeds = append(seeds,
		golden,
		golden[:len(golden)-1],          // truncated data
		golden[:100],                    // truncated header
		append(slices.Clone(golden), 0), // trailing byte
		withLength(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{}}`, 1), // duplicate
		withLength(`{"__metadata__":{"k":1}}`),                                        // non-string metadata
		withLength(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 1, 2, 3),  // hole
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Parse error %v does not wrap ErrFormat", err)
			}
			return
		}
		var tensors []Tensor
		for _, name := range file.Names() {
			info, ok := file.Info(name)
			if !ok {
				t.Fatalf("Info(%q) missing for a listed name", name)
			}
			data, err := file.Data(name)
			if err != nil {
				t.Fatalf("Data(%q): %v", name, err)
			}
			want, ok := byteSize(info.Shape, info.DType)
			if !ok || int64(len(data)) != want {
				t.Fatalf("Data(%q) has %d bytes, want numel*size = %d", name, len(data), want)
			}
			tensors = append(tensors, Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
		}
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, file.Metadata()); err != nil {
			t.Fatalf("re-Encode of a parsed file: %v", err)
		}
		again, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("re-Parse of re-encoded file: %v", err)
		}
		if !slices.Equal(again.Names(), file.Names()) {
			t.Fatalf("names after round trip = %q, want %q", again.Names(), file.Names())
		}
		if !maps.Equal(again.Metadata(), file.Metadata()) {
			t.Fatalf("metadata after round trip = %q, want %q", again.Metadata(), file.Metadata())
		}
		for _, tn := range tensors {
			got, _ := again.Info(tn.Name)
			if got.DType != tn.DType || !slices.Equal(got.Shape, tn.Shape) || got.End-got.Begin != int64(len(tn.Data)) {
				t.Fatalf("Info(%q) after round trip = %+v, want dtype %s shape %v and %d bytes", tn.Name, got, tn.DType, tn.Shape, len(tn.Data))
			}
			if data, _ := again.Data(tn.Name); !bytes.Equal(data, tn.Data) {
				t.Fatalf("Data(%q) changed in the round trip", tn.Name)
			}
		}
	})
}

// FuzzScanner checks the header scanner against encoding/json: any text it
// skips as one value is valid JSON and the other way round (texts with \u
// escapes are left out, since the scanner refuses lone surrogates on purpose),
// and a valid UTF-8 string it reads decodes as encoding/json decodes it.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `{"a":[true,false,null,-0.5e3]}`, `"x\n\"y"`, `[`, `{"a" 1}`, `01`, `[1,]`, `"\u00e9"`, `{"a":{"b":{}}} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := &scanner{b: b}
		ok := sc.skip() == nil && sc.atEnd()
		if !bytes.Contains(b, []byte(`\u`)) && ok != json.Valid(b) {
			t.Fatalf("scanner accepts %q: %v; encoding/json: %v", b, ok, json.Valid(b))
		}
		if !utf8.Valid(b) { // callers check UTF-8 first; encoding/json replaces bad bytes
			return
		}
		sc = &scanner{b: b}
		got, err := sc.str()
		if err != nil || !sc.atEnd() {
			return
		}
		var want string
		if err := json.Unmarshal(b, &want); err != nil || got != want {
			t.Fatalf("scanner reads %q as %q; encoding/json: %q, %v", b, got, want, err)
		}
	})
}
