package inference

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// forwardAll gives each layer, bit for bit, what its own Forward gives: quantized
// q/k/v-like layers with a bias and a LoRA adapter on one of them, scales in float32
// and compact bfloat16, one and three rows of x, exact and on 8-bit activations, and
// a set with a dense layer (which takes the layers one by one).
func TestForwardAll(t *testing.T) {
	b := cpu(t)
	mx.SetDefault(b)
	const in = 256
	flag := new(actChoice)
	var ls []*Linear
	for i, out := range []int{128, 64, 64} {
		w, s, bi := mx.Quantize(mx.RandomNormal(uint64(10+i), out, in), 64, 4)
		ls = append(ls, &Linear{In: in, Out: out, Weight: w, Scales: s, Biases: bi, GroupSize: 64, Bits: 4, act: flag})
	}
	ls[0].Bias = mx.RandomNormal(20, 128)
	ls[2].adapters = []*LoRA{{A: mx.RandomNormal(21, in, 4), B: mx.RandomNormal(22, 4, 64), Scale: 2}}
	half := make([]*Linear, len(ls))
	for i, l := range ls {
		h := *l
		h.Scales, h.Biases = mx.Compact(mx.AsType(l.Scales, mx.BFloat16)), mx.Compact(mx.AsType(l.Biases, mx.BFloat16))
		half[i] = &h
	}
	dense := []*Linear{ls[0], {In: in, Out: 32, Weight: mx.RandomNormal(23, 32, in)}, ls[2]}
	for name, set := range map[string][]*Linear{"float32 scales": ls, "bfloat16 scales": half, "with a dense layer": dense} {
		for _, rows := range []int{1, 3} {
			for _, a8 := range []bool{false, true} {
				flag.decode.Store(a8)
				flag.prefill.Store(a8)
				x := mx.RandomNormal(uint64(30+rows), 1, rows, in)
				got := forwardAll(x, set...)
				for i, l := range set {
					want, err := l.Forward(x).Float32s()
					if err != nil {
						t.Fatal(err)
					}
					g, err := got[i].Float32s()
					if err != nil {
						t.Fatal(err)
					}
					label := fmt.Sprintf("%s, %d rows, int8 %v, layer %d", name, rows, a8, i)
					if len(g) != len(want) {
						t.Fatalf("%s: %d values, want %d", label, len(g), len(want))
					}
					for j := range want {
						if math.Float32bits(g[j]) != math.Float32bits(want[j]) {
							t.Fatalf("%s: [%d] = %g, its Forward gives %g", label, j, g[j], want[j])
						}
					}
				}
			}
		}
	}
	flag.decode.Store(false)
	flag.prefill.Store(false)
}
