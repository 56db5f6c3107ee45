package inference

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// tailOf is block i's compiled tail state.
func tailOf(m *Model, i int) *blockTail {
	switch b := m.layers[i].(type) {
	case *llamaBlock:
		return &b.tail
	case *qwen3Block:
		return &b.tail
	}
	panic(fmt.Sprintf("block %T", m.layers[i]))
}

// TestCompiledTailMLX decodes with every block's tail compiled (mx.Compile) and
// with its ops, on the mlx backend (skipped where libmlxc does not load): the
// logits of every step are the same bit for bit on MLX's CPU device (a GPU fuses
// the trace's elementwise ops: within rounding there). It covers Llama, Qwen2
// (biases on q/k/v) and Qwen3, float32 and 4-bit weights, 8-bit activations,
// and an adapter on one block's down projection (that block's tail runs as ops,
// the others stay compiled).
func TestCompiledTailMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	if c := mx.Compile(be, 1, func(in []*mx.Array) []*mx.Array { return in }); !c.Compiles() {
		t.Skip("this libmlxc does not compile")
	}
	gpu := false
	if d, ok := be.(interface{ Device() string }); ok {
		gpu = d.Device() == "gpu"
	}
	defer func() { compileTails = true }()
	for _, c := range []struct {
		arch          string
		bits          int
		int8, adapter bool
	}{{"llama", 0, false, false}, {"qwen2", 0, false, false}, {"qwen3", 0, false, false},
		{"llama", 4, false, false}, {"qwen3", 4, true, false}, {"llama", 0, false, true}} {
		name := fmt.Sprintf("%s/bits=%d/int8=%v/adapter=%v", c.arch, c.bits, c.int8, c.adapter)
		t.Run(name, func(t *testing.T) {
			cfg := tinyConfig(c.arch)
			cfg.HiddenSize, cfg.IntermediateSize = 64, 128
			if c.bits > 0 {
				cfg.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 32, Bits: c.bits}}
			}
			m := NewRandom(cfg, 7, be)
			m.SetInt8Decode(c.int8)
			if c.adapter {
				l := m.layers[1].(*llamaBlock).MLP.Down
				a := NewAdapter("user", map[string]LoRA{"model.layers.1.mlp.down_proj": {
					A:     randomOn(be, 3, l.In, 2),
					B:     randomOn(be, 4, 2, l.Out),
					Scale: 2,
				}})
				if _, err := m.PushAdapter(a); err != nil {
					t.Fatal(err)
				}
			}
			ids := tokenSeq(24, cfg.VocabSize, 3)
			compileTails = false
			want := stepLogits(t, NewSession(m), ids)
			compileTails = true
			got := stepLogits(t, NewSession(m), ids)
			for i := range got {
				d := maxAbsDiff(got[i], want[i])
				if d != 0 && (!gpu || d > 1e-4*spreadOf(want[i])) {
					t.Fatalf("step %d: compiled tails' logits differ from the ops' by %g", i, d)
				}
			}
			for i := range m.layers {
				tl := tailOf(m, i)
				compiled := tl.c != nil && tl.c.Compiles()
				if wantC := !(c.adapter && i == 1); compiled != wantC {
					t.Errorf("block %d: compiled %v, want %v", i, compiled, wantC)
				}
			}
			if slices.Equal(want[0], want[len(want)-1]) {
				t.Fatal("the steps' logits do not change")
			}
		})
	}
}

// randomOn is a (rows, cols) float32 array on b of values uniform in ±0.3.
func randomOn(b mx.Backend, seed uint64, rows, cols int) *mx.Array {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = 0.6*r.Float32() - 0.3
	}
	return mx.FromData(b, mx.Float32, v, rows, cols)
}
