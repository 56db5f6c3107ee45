package inference

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// poison rewrites one tensor of dir's model.safetensors in dtype dt with
// value at element at.
func poison(t *testing.T, dir, name string, dt safetensors.DType, at int, value float32) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		data, _ := f.Data(n)
		tn := safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(data)}
		if n == name {
			v, err := safetensors.Float32s(info.DType, data)
			if err != nil {
				t.Fatal(err)
			}
			v[at] = value
			if tn.Data, err = safetensors.EncodeFloat32s(dt, v); err != nil {
				t.Fatal(err)
			}
			tn.DType = dt
		}
		ts = append(ts, tn)
	}
	f.Close()
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

// A NaN or an infinity in a checkpoint is refused at load, naming the tensor
// and the element: it would otherwise spread through every activation and
// show up later as a nonsense reply or a NaN training loss.
func TestLoadRefusesNonFiniteWeights(t *testing.T) {
	b := cpu(t)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tt := range []struct {
		tensor string
		dt     safetensors.DType
		at     int
		value  float32
	}{
		{"model.layers.1.mlp.up_proj.weight", safetensors.DTypeF32, 37, nan},
		{"model.layers.0.self_attn.q_proj.weight", safetensors.DTypeF32, 0, float32(math.Inf(-1))},
		{"model.embed_tokens.weight", safetensors.DTypeBF16, 1001, nan},
		{"model.norm.weight", safetensors.DTypeBF16, 31, inf},
		{"model.layers.0.input_layernorm.weight", safetensors.DTypeF16, 5, inf},
		{"model.layers.1.mlp.down_proj.weight", safetensors.DTypeF16, 3, nan},
	} {
		t.Run(fmt.Sprintf("%s %s %v", tt.tensor, tt.dt, tt.value), func(t *testing.T) {
			dir := saveTiny(t, tinyConfig("llama"), nil)
			poison(t, dir, tt.tensor, tt.dt, tt.at, tt.value)
			_, err := Load(dir, b)
			want := fmt.Sprintf("tensor %q holds", tt.tensor)
			if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("element %d", tt.at)) {
				t.Fatalf("got %v, want ErrNonFinite naming %s and element %d", err, tt.tensor, tt.at)
			}
		})
	}
	// The largest finite values and negative zero are weights like any other.
	dir := saveTiny(t, tinyConfig("llama"), nil)
	poison(t, dir, "model.norm.weight", safetensors.DTypeF16, 0, 65504)
	poison(t, dir, "model.layers.0.mlp.up_proj.weight", safetensors.DTypeBF16, 1, float32(math.Copysign(0, -1)))
	poison(t, dir, "model.layers.1.mlp.up_proj.weight", safetensors.DTypeF32, 2, math.MaxFloat32)
	if _, err := Load(dir, b); err != nil {
		t.Fatalf("finite extremes: %v", err)
	}
}

func TestFirstNonFinite(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.DTypeF32, safetensors.DTypeF16, safetensors.DTypeBF16, safetensors.DTypeF64} {
		for _, n := range []int{1, 3, 4, 7, 8, 9, 33} {
			for at := 0; at < n; at++ {
				for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
					v := make([]float64, n)
					for i := range v {
						v[i] = float64(i) - 3.5
					}
					v[at] = bad
					raw := encodeFloats(t, dt, v)
					if got := firstNonFinite(dt, raw); got != at {
						t.Fatalf("%s n=%d: bad value at %d found at %d", dt, n, at, got)
					}
					v[at] = 1
					if got := firstNonFinite(dt, encodeFloats(t, dt, v)); got != -1 {
						t.Fatalf("%s n=%d: finite values reported bad at %d", dt, n, got)
					}
				}
			}
		}
	}
}

func encodeFloats(t *testing.T, dt safetensors.DType, v []float64) []byte {
	t.Helper()
	if dt == safetensors.DTypeF64 {
		raw := make([]byte, 8*len(v))
		for i, x := range v {
			bits := math.Float64bits(x)
			for k := range 8 {
				raw[8*i+k] = byte(bits >> (8 * k))
			}
		}
		return raw
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	raw, err := safetensors.EncodeFloat32s(dt, f)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// BenchmarkFirstNonFinite is the cost of the check per byte of weights, to
// set beside the bf16-to-float32 conversion every load does anyway.
func BenchmarkFirstNonFinite(b *testing.B) {
	for _, dt := range []safetensors.DType{safetensors.DTypeBF16, safetensors.DTypeF32} {
		raw := make([]byte, 64<<20)
		for i := range raw {
			raw[i] = byte(i*7) & 0x3f
		}
		b.Run(string(dt), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if firstNonFinite(dt, raw) >= 0 {
					b.Fatal("found a non-finite value")
				}
			}
		})
	}
}

// A tensor name is the file's: one holding escape sequences must not clear
// the screen or set the terminal's title when the unused-tensor warning is
// printed. The warning quotes every name.
func TestUnusedTensorWarningQuotesNames(t *testing.T) {
	const evil = "x\x1b[2J\x1b]0;pwned\x07\u009b31m"
	dir := saveTiny(t, tinyConfig("llama"), func(p map[string]*mx.Array) {
		p[evil] = mx.Zeros(2)
	})
	m, err := Load(dir, cpu(t))
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(m.Warnings(), "\n")
	if strings.ContainsAny(w, "\x1b\x07\u009b") || !strings.Contains(w, strconv.Quote(evil)) {
		t.Errorf("warning %q holds control characters or does not quote the name", w)
	}
}
