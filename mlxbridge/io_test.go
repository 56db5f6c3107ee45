package mlxbridge_test

import (
	"path/filepath"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*mx.Array{
		"f32":  mx.FromData(b, mx.Float32, []float32{1.5, -2, 3e-8}, 3),
		"f16":  mx.FromData(b, mx.Float16, []float32{0.1, 65504}, 2, 1),
		"bf16": mx.FromData(b, mx.BFloat16, []float32{3.14159, -1}, 1, 2),
		"i32":  mx.FromData(b, mx.Int32, []int32{-7, 1 << 30}, 2),
		"u32":  mx.FromData(b, mx.Uint32, []uint32{0x89abcdef}, 1),
		"mask": mx.FromData(b, mx.Bool, []uint8{1, 0, 1}, 3),
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := mx.SaveSafetensors(path, in, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	out, meta, err := mx.LoadSafetensors(b, path)
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "mlx" || len(out) != len(in) {
		t.Fatalf("got %d tensors, metadata %v", len(out), meta)
	}
	for name, a := range in {
		got := out[name]
		if got.DType() != a.DType() || got.String() != a.String() {
			t.Errorf("%s: got %s, want %s", name, got, a)
			continue
		}
		if a.DType().IsFloat() {
			w, _ := a.Float32s()
			g, _ := got.Float32s()
			for i := range w {
				if w[i] != g[i] {
					t.Errorf("%s[%d]: got %v, want %v", name, i, g[i], w[i])
				}
			}
		}
	}
	u, _ := out["u32"].Uint32s()
	if u[0] != 0x89abcdef {
		t.Errorf("u32: got %#x", u[0])
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := mx.LoadTensor(b, f, "missing"); err == nil {
		t.Errorf("missing tensor: no error")
	}
}
