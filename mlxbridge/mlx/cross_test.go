//go:build cgo && (darwin || linux)

package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu"
)

// The cross-backend test builds each op from the same host data on the cpu
// backend (the reference) and on mlx and compares the results element by element:
// |mlx − cpu| ≤ atol + rtol·|cpu|. Float32 families must agree to 1e-5 (2e-4 for
// long reductions: matmul, attention, quantized products, whole-model gradients,
// where summation order differs); half-precision inputs to one unit in the last
// place of their dtype. The largest error of each family is logged.

type crossCase struct {
	name       string
	atol, rtol float64
	build      func(b mx.Backend, in *inputs) []*mx.Array
}

// inputs makes host data that is identical on every backend.
type inputs struct {
	b    mx.Backend
	seed uint64
}

func (in *inputs) vals(n int, kind string) []float32 {
	in.seed++
	r := rand.New(rand.NewPCG(in.seed, 99))
	v := make([]float32, n)
	for i := range v {
		switch kind {
		case "positive":
			v[i] = 0.25 + 2*float32(r.Float64())
		case "wide":
			v[i] = float32(r.NormFloat64() * 4)
		default:
			v[i] = float32(r.NormFloat64())
		}
	}
	return v
}

func (in *inputs) randn(shape ...int) *mx.Array {
	return mx.FromData(in.b, mx.Float32, in.vals(numel(shape), ""), shape...)
}

func (in *inputs) kind(kind string, shape ...int) *mx.Array {
	return mx.FromData(in.b, mx.Float32, in.vals(numel(shape), kind), shape...)
}

func (in *inputs) ints(n, hi int, shape ...int) *mx.Array {
	in.seed++
	r := rand.New(rand.NewPCG(in.seed, 5))
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(r.IntN(hi))
	}
	return mx.FromData(in.b, mx.Int32, v, shape...)
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func crossCases() []crossCase {
	var cases []crossCase
	add := func(name string, atol, rtol float64, f func(b mx.Backend, in *inputs) []*mx.Array) {
		cases = append(cases, crossCase{name, atol, rtol, f})
	}
	const tight, loose = 1e-5, 2e-4
	unary := map[string]func(*mx.Array) *mx.Array{
		"neg": mx.Neg, "exp": mx.Exp, "tanh": mx.Tanh, "sigmoid": mx.Sigmoid, "abs": mx.Abs,
		"square": mx.Square, "sign": mx.Sign, "silu": mx.Silu, "gelu": mx.Gelu, "gelu_approx": mx.GeluApprox,
	}
	for name, f := range unary {
		add("unary/"+name, tight, tight, func(b mx.Backend, in *inputs) []*mx.Array { return []*mx.Array{f(in.kind("wide", 7, 33))} })
	}
	for name, f := range map[string]func(*mx.Array) *mx.Array{"log": mx.Log, "sqrt": mx.Sqrt, "rsqrt": mx.Rsqrt} {
		add("unary/"+name, tight, tight, func(b mx.Backend, in *inputs) []*mx.Array { return []*mx.Array{f(in.kind("positive", 7, 33))} })
	}
	for _, op := range []mx.UnaryOp{mx.OpSiluGrad, mx.OpGeluGrad, mx.OpGeluApproxGrad} {
		add(fmt.Sprintf("unary/grad-op-%d", op), tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
			x := in.kind("wide", 5, 40)
			h, err := b.Unary(op, x)
			if err != nil {
				return []*mx.Array{mx.Errorf("%v", err)}
			}
			return []*mx.Array{mx.Wrap(b, h, x.Shape(), x.DType())}
		})
	}
	binary := map[string]func(a, b *mx.Array) *mx.Array{
		"add": mx.Add, "sub": mx.Sub, "mul": mx.Mul, "div": mx.Div, "maximum": mx.Maximum, "minimum": mx.Minimum,
	}
	for name, f := range binary {
		add("binary/"+name, tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
			return []*mx.Array{f(in.randn(4, 1, 9), in.randn(3, 9)), f(in.randn(6, 5), in.randn(6, 5))}
		})
	}
	add("binary/power", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		return []*mx.Array{mx.Power(in.kind("positive", 5, 8), in.randn(8))}
	})
	for name, f := range map[string]func(a, b *mx.Array) *mx.Array{"greater": mx.Greater, "greater_equal": mx.GreaterEqual, "less": mx.Less, "equal": mx.Equal} {
		add("compare/"+name, 0, 0, func(b mx.Backend, in *inputs) []*mx.Array {
			x := in.randn(6, 7)
			return []*mx.Array{mx.AsType(f(x, in.randn(7)), mx.Float32), mx.AsType(f(x, x), mx.Float32)}
		})
	}
	add("reduce", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.randn(3, 4, 5, 6)
		return []*mx.Array{
			mx.Sum(x, []int{1, 3}, false), mx.Sum(x, nil, false), mx.Mean(x, []int{-1}, true),
			mx.Max(x, []int{0, 2}, false), mx.Min(x, []int{3}, true), mx.Max(x, nil, false),
		}
	})
	add("argmax", 0, 0, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.randn(4, 7, 5)
		return []*mx.Array{mx.AsType(mx.ArgMax(x, 1, false), mx.Float32), mx.AsType(mx.ArgMax(x, -1, true), mx.Float32)}
	})
	add("matmul", loose, loose, func(b mx.Backend, in *inputs) []*mx.Array {
		var out []*mx.Array
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			as, bs := []int{2, 1, 17, 33}, []int{3, 33, 19}
			if tr[0] {
				as = []int{2, 1, 33, 17}
			}
			if tr[1] {
				bs = []int{3, 19, 33}
			}
			out = append(out, mx.MatmulT(in.randn(as...), in.randn(bs...), tr[0], tr[1]))
		}
		return append(out, mx.MatmulT(in.randn(5, 64), in.randn(48, 64), false, true))
	})
	add("shape", 0, 0, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.randn(3, 4, 5)
		return []*mx.Array{
			mx.Reshape(x, 5, -1), mx.Transpose(x, 2, 0, 1), mx.Broadcast(in.randn(4, 1), []int{2, 4, 6}),
			mx.SliceStep(x, []int{1, 0, 1}, []int{3, 4, 5}, []int{1, 2, 3}),
			mx.SliceUpdate(x, in.randn(2, 2, 2), []int{1, 1, 0}, []int{1, 2, 3}),
			mx.Concatenate([]*mx.Array{x, in.randn(3, 2, 5), in.randn(3, 1, 5)}, 1),
			mx.Stack([]*mx.Array{x, x}, 3),
		}
	})
	add("index", 0, 0, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.randn(6, 5, 4)
		ids := in.ints(8, 6, 2, 4)
		along := in.ints(6*3*4, 5, 6, 3, 4)
		out := []*mx.Array{
			mx.Take(x, ids, 0), mx.Take(x, in.ints(3, 5, 3), 1), mx.TakeAlongAxis(x, along, 1),
			mx.TakeAlongAxis(x, in.ints(6*2, 4, 6, 1, 2), 2),
			mx.Where(mx.Greater(x, in.randn(4)), x, in.randn(5, 1)),
			mx.Where(in.kind("positive", 5, 4), x, in.randn(4)), // float condition: nonzero picks a
		}
		// Take's and TakeAlongAxis's adjoints, called directly.
		upd := in.randn(6, 3, 4)
		idx := in.ints(3, 5, 3)
		h, err := b.ScatterAdd(upd, idx, 1, []int{6, 5, 4})
		out = append(out, wrapOrErr(b, h, err, []int{6, 5, 4}))
		upd2 := in.randn(2, 4, 3)
		idx2 := in.ints(2*4, 6, 2, 4)
		h, err = b.ScatterAdd(upd2, idx2, 0, []int{6, 3})
		out = append(out, wrapOrErr(b, h, err, []int{6, 3}))
		h, err = b.ScatterAddAlongAxis(in.randn(6, 3, 4), along, 1, []int{6, 5, 4})
		return append(out, wrapOrErr(b, h, err, []int{6, 5, 4}))
	})
	add("astype", 0, 0, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.kind("wide", 4, 9)
		return []*mx.Array{
			mx.AsType(mx.AsType(x, mx.Int32), mx.Float32), mx.AsType(mx.AsType(x, mx.Float16), mx.Float32),
			mx.AsType(mx.AsType(x, mx.BFloat16), mx.Float32), mx.AsType(mx.AsType(x, mx.Bool), mx.Float32),
			mx.AsType(mx.AsType(mx.Abs(x), mx.Uint32), mx.Float32),
		}
	})
	add("softmax+logsumexp", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		x := in.kind("wide", 3, 4, 50)
		return []*mx.Array{mx.Softmax(x, -1), mx.Softmax(x, 1), mx.LogSumExp(x, []int{-1}, false),
			mx.LogSumExp(x, []int{0, 2}, true), mx.LogSoftmax(x)}
	})
	add("rms_norm", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		return []*mx.Array{mx.RMSNorm(in.randn(2, 5, 64), in.randn(64), 1e-5), mx.RMSNorm(in.randn(3, 7), in.randn(7), 1e-6)}
	})
	add("rope", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		var out []*mx.Array
		for _, o := range []mx.RoPEOptions{
			{Dims: 16, Base: 10000, Scale: 1},
			{Dims: 16, Traditional: true, Base: 10000, Scale: 1, Offset: 7},
			{Dims: 12, Base: 1e6, Scale: 0.25, Offset: 40},
			{Dims: 16, Base: 10000, Scale: 1, Offset: 3, Inverse: true},
			{Dims: 8, Traditional: true, Base: 500, Scale: 2, Inverse: true},
		} {
			out = append(out, mx.RoPE(in.randn(2, 3, 5, 16), o))
		}
		return append(out, mx.RoPE(in.randn(5, 16), mx.RoPEOptions{Dims: 16, Base: 10000, Offset: 2}))
	})
	add("sdpa", loose, loose, func(b mx.Backend, in *inputs) []*mx.Array {
		q, k, v := in.randn(2, 8, 5, 16), in.randn(2, 2, 9, 16), in.randn(2, 2, 9, 12)
		fm := in.randn(1, 8, 5, 9)
		keep := mx.Greater(in.randn(2, 1, 5, 9), mx.FromData(b, mx.Float32, []float32{-1}, 1))
		return []*mx.Array{
			mx.ScaledDotProductAttention(q, k, v, 0.25, false, nil),
			mx.ScaledDotProductAttention(q, k, v, 0.25, true, nil), // L < S: offset causal
			mx.ScaledDotProductAttention(q, k, v, 0.25, false, fm),
			mx.ScaledDotProductAttention(q, k, v, 0.25, true, fm),
			mx.ScaledDotProductAttention(q, k, v, 0.25, false, keep),
			mx.ScaledDotProductAttention(q, k, v, 0.25, true, keep),
			mx.ScaledDotProductAttention(in.randn(1, 4, 6, 8), in.randn(1, 4, 6, 8), in.randn(1, 4, 6, 8), 0.35, true, nil),
		}
	})
	add("quantized_matmul", loose, loose, func(b mx.Backend, in *inputs) []*mx.Array {
		var out []*mx.Array
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				w := in.randn(24, 128)
				wq, sc, bi := mx.Quantize(w, g, bits)
				out = append(out, mx.QuantizedMatmul(in.randn(3, 128), wq, sc, bi, true, g, bits),
					mx.QuantizedMatmul(in.randn(2, 1, 24), wq, sc, bi, false, g, bits))
			}
		}
		return out
	})
	add("cross_entropy", tight, tight, func(b mx.Backend, in *inputs) []*mx.Array {
		logits := in.kind("wide", 2, 6, 40)
		tg := in.ints(12, 40, 2, 6)
		return []*mx.Array{mx.CrossEntropy(logits, tg), mx.CrossEntropyMasked(logits, tg, in.kind("positive", 2, 6))}
	})
	// Half precision: inputs rounded to the dtype, results compared to one ulp.
	for _, dt := range []mx.DType{mx.Float16, mx.BFloat16} {
		ulp := 1.0 / 1024
		if dt == mx.BFloat16 {
			ulp = 1.0 / 128
		}
		add("half/"+dt.String(), ulp, ulp, func(b mx.Backend, in *inputs) []*mx.Array {
			h := func(shape ...int) *mx.Array { return mx.AsType(in.randn(shape...), dt) }
			x, w := h(4, 32), h(32)
			return []*mx.Array{
				mx.Add(x, x), mx.Mul(x, h(32)), mx.Exp(x), mx.Silu(x), mx.Softmax(x, -1), mx.RMSNorm(x, w, 1e-5),
				mx.Sum(x, []int{-1}, false), mx.RoPE(h(1, 2, 4, 32), mx.RoPEOptions{Dims: 32, Base: 10000, Scale: 1, Offset: 1}),
			}
		})
	}
	add("grad/transformer-block", loose, loose, gradBlock)
	return cases
}

func wrapOrErr(b mx.Backend, h mx.Handle, err error, shape []int) *mx.Array {
	if err != nil {
		return mx.Errorf("%v", err)
	}
	return mx.Wrap(b, h, shape, mx.Float32)
}

// gradBlock is a one-layer transformer's loss and its gradients: RMSNorm, q/k/v
// projections, RoPE, grouped causal attention, a SwiGLU MLP, an embedding lookup
// and a masked cross-entropy. mlx differentiates it with MLX's autodiff, cpu with
// mlxbridge's tape, so this compares the two autodiffs on a whole model.
func gradBlock(b mx.Backend, in *inputs) []*mx.Array {
	const vocab, d, hq, hkv, hd, l, ff = 32, 32, 4, 2, 8, 6, 48
	params := []*mx.Array{
		mx.MulScalar(in.randn(vocab, d), 0.5),           // 0 embed
		mx.AddScalar(mx.MulScalar(in.randn(d), 0.1), 1), // 1 norm
		mx.MulScalar(in.randn(hq*hd, d), 0.2),           // 2 wq
		mx.MulScalar(in.randn(hkv*hd, d), 0.2),          // 3 wk
		mx.MulScalar(in.randn(hkv*hd, d), 0.2),          // 4 wv
		mx.MulScalar(in.randn(d, hq*hd), 0.2),           // 5 wo
		mx.MulScalar(in.randn(ff, d), 0.2),              // 6 gate
		mx.MulScalar(in.randn(ff, d), 0.2),              // 7 up
		mx.MulScalar(in.randn(d, ff), 0.2),              // 8 down
	}
	tokens := in.ints(2*l, vocab, 2, l)
	targets := in.ints(2*l, vocab, 2, l)
	mask := mx.FromData(b, mx.Float32, []float32{0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0}, 2, l)
	rope := mx.RoPEOptions{Dims: hd, Base: 10000, Scale: 1}
	loss := func(p []*mx.Array) []*mx.Array {
		x := mx.Take(p[0], tokens, 0) // (2, L, D)
		hn := mx.RMSNorm(x, p[1], 1e-5)
		heads := func(w *mx.Array, n int) *mx.Array {
			return mx.Transpose(mx.Reshape(mx.MatmulT(hn, w, false, true), 2, l, n, hd), 0, 2, 1, 3)
		}
		q, k, v := mx.RoPE(heads(p[2], hq), rope), mx.RoPE(heads(p[3], hkv), rope), heads(p[4], hkv)
		att := mx.ScaledDotProductAttention(q, k, v, float32(1/math.Sqrt(hd)), true, nil)
		att = mx.Reshape(mx.Transpose(att, 0, 2, 1, 3), 2, l, hq*hd)
		x = mx.Add(x, mx.MatmulT(att, p[5], false, true))
		hn = mx.RMSNorm(x, p[1], 1e-5)
		mlp := mx.Mul(mx.Silu(mx.MatmulT(hn, p[6], false, true)), mx.MatmulT(hn, p[7], false, true))
		x = mx.Add(x, mx.MatmulT(mlp, p[8], false, true))
		logits := mx.MatmulT(x, p[0], false, true) // tied embedding
		return []*mx.Array{mx.CrossEntropyMasked(logits, targets, mask), logits}
	}
	outs, grads, err := mx.ValueAndGrad(loss, params)
	if err != nil {
		return []*mx.Array{mx.Errorf("value and grad: %v", err)}
	}
	return append(outs, grads...)
}

func TestCrossBackend(t *testing.T) {
	be := openOrSkip(t)
	ref := cpu.New()
	for _, c := range crossCases() {
		t.Run(c.name, func(t *testing.T) {
			want := c.build(ref, &inputs{b: ref})
			got := c.build(be, &inputs{b: be})
			if len(got) != len(want) {
				t.Fatalf("got %d outputs, want %d", len(got), len(want))
			}
			var worstAbs, worstRel float64
			for i := range want {
				w, err := readF64(want[i])
				if err != nil {
					t.Fatalf("cpu output %d: %v", i, err)
				}
				g, err := readF64(got[i])
				if err != nil {
					t.Fatalf("mlx output %d: %v", i, err)
				}
				if fmt.Sprint(got[i].Shape()) != fmt.Sprint(want[i].Shape()) || got[i].DType() != want[i].DType() {
					t.Fatalf("output %d: mlx %s, cpu %s", i, got[i], want[i])
				}
				for j := range w {
					if math.IsNaN(w[j]) && math.IsNaN(g[j]) || w[j] == g[j] {
						continue
					}
					d := math.Abs(g[j] - w[j])
					worstAbs = max(worstAbs, d)
					if w[j] != 0 {
						worstRel = max(worstRel, d/math.Abs(w[j]))
					}
					if !(d <= c.atol+c.rtol*math.Abs(w[j])) {
						t.Errorf("output %d element %d: mlx %.8g, cpu %.8g (diff %.3g)", i, j, g[j], w[j], d)
						break
					}
				}
			}
			t.Logf("%s: max |mlx-cpu| %.3g, max relative %.3g (tolerance %.0e + %.0e·|cpu|)", c.name, worstAbs, worstRel, c.atol, c.rtol)
		})
	}
}

func readF64(a *mx.Array) ([]float64, error) {
	if err := a.Err(); err != nil {
		return nil, err
	}
	if !a.DType().IsFloat() {
		a = mx.AsType(a, mx.Float32)
	}
	v, err := a.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out, nil
}
