package cpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu"
)

// The fused causal attention over sequences longer than the suite's must equal
// attention composed from plain ops, values and gradients, including with a cached
// prefix (more keys than queries) and lengths that are not a power of two.
func TestCausalBlocksMatchComposed(t *testing.T) {
	fused, composed := cpu.New(), plain{cpu.New()}
	for _, c := range []struct{ l, s int }{{128, 128}, {200, 200}, {150, 300}, {257, 257}} {
		run := func(b mx.Backend) (out []float32, grads [][]float32) {
			q := randn(b, 1, 1, 4, c.l, 16)
			k := randn(b, 2, 1, 2, c.s, 16)
			v := randn(b, 3, 1, 2, c.s, 16)
			w := randn(b, 4, 1, 4, c.l, 16)
			outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
				o := mx.ScaledDotProductAttention(p[0], p[1], p[2], 0.25, true, nil)
				return []*mx.Array{mx.Sum(mx.Mul(o, w), nil, false), o}
			}, []*mx.Array{q, k, v})
			if err != nil {
				t.Fatal(err)
			}
			if out, err = outs[1].Float32s(); err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				f, err := g.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				grads = append(grads, f)
			}
			return
		}
		fo, fg := run(fused)
		co, cg := run(composed)
		check := func(name string, got, want []float32) {
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-4+1e-3*math.Abs(float64(want[i])) {
					t.Fatalf("L=%d S=%d %s[%d]: fused %v, composed %v", c.l, c.s, name, i, got[i], want[i])
				}
			}
		}
		check("out", fo, co)
		for i, n := range []string{"dq", "dk", "dv"} {
			check(n, fg[i], cg[i])
		}
	}
}

func randn(b mx.Backend, seed uint64, shape ...int) *mx.Array {
	r := rand.New(rand.NewPCG(seed, 1))
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return mx.FromData(b, mx.Float32, v, shape...)
}
