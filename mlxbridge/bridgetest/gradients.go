package bridgetest

import (
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// gradCase is one op under a gradient check: f maps float inputs of the given
// shapes to an array; the check differentiates Σ f(x)·R for a fixed random R.
type gradCase struct {
	name     string
	shapes   [][]int
	f        func(xs []*mx.Array) *mx.Array
	positive bool // inputs drawn from [0.5, 2): for log, sqrt, power, div
}

func (s *suite) gradCases() []gradCase {
	ids := s.ints([]int32{2, 0, 2, 1}, 4)
	along := s.ints([]int32{1, 0, 3, 3, 2, 0}, 2, 3, 1)
	cond := mx.FromData(s.b, mx.Bool, []uint8{1, 0, 0, 1, 1, 0}, 2, 3)
	one := func(f func(*mx.Array) *mx.Array) func([]*mx.Array) *mx.Array {
		return func(x []*mx.Array) *mx.Array { return f(x[0]) }
	}
	two := func(f func(a, b *mx.Array) *mx.Array) func([]*mx.Array) *mx.Array {
		return func(x []*mx.Array) *mx.Array { return f(x[0], x[1]) }
	}
	wq, sc, bi := mx.Quantize(s.randn(40, 6, 64), 32, 4)
	cases := []gradCase{
		{"add broadcast", [][]int{{2, 3}, {3}}, two(mx.Add), false},
		{"sub broadcast", [][]int{{2, 1}, {2, 3}}, two(mx.Sub), false},
		{"mul broadcast", [][]int{{2, 3, 1}, {1, 4}}, two(mx.Mul), false},
		{"div", [][]int{{2, 3}, {2, 3}}, two(mx.Div), true},
		{"maximum", [][]int{{5}, {5}}, two(mx.Maximum), false},
		{"minimum", [][]int{{5}, {1}}, two(mx.Minimum), false},
		{"power", [][]int{{4}, {4}}, two(mx.Power), true},
		{"neg", [][]int{{5}}, one(mx.Neg), false},
		{"exp", [][]int{{5}}, one(mx.Exp), false},
		{"log", [][]int{{5}}, one(mx.Log), true},
		{"sqrt", [][]int{{5}}, one(mx.Sqrt), true},
		{"rsqrt", [][]int{{5}}, one(mx.Rsqrt), true},
		{"silu", [][]int{{6}}, one(mx.Silu), false},
		{"gelu", [][]int{{6}}, one(mx.Gelu), false},
		{"gelu_approx", [][]int{{6}}, one(mx.GeluApprox), false},
		{"sigmoid", [][]int{{6}}, one(mx.Sigmoid), false},
		{"tanh", [][]int{{6}}, one(mx.Tanh), false},
		{"abs", [][]int{{6}}, one(mx.Abs), false},
		{"square", [][]int{{6}}, one(mx.Square), false},
		{"sum axes", [][]int{{2, 3, 4}}, one(func(x *mx.Array) *mx.Array { return mx.Sum(x, []int{0, 2}, false) }), false},
		{"sum axes of one", [][]int{{2, 1, 4, 1}}, one(func(x *mx.Array) *mx.Array { return mx.Square(mx.Sum(x, []int{1, 3}, false)) }), false},
		{"max axis of one", [][]int{{3, 1}}, one(func(x *mx.Array) *mx.Array { return mx.Max(x, []int{1}, true) }), false},
		{"mean keep", [][]int{{2, 3}}, one(func(x *mx.Array) *mx.Array { return mx.Mean(x, []int{1}, true) }), false},
		{"max", [][]int{{3, 4}}, one(func(x *mx.Array) *mx.Array { return mx.Max(x, []int{-1}, false) }), false},
		{"min", [][]int{{3, 4}}, one(func(x *mx.Array) *mx.Array { return mx.Min(x, []int{0}, false) }), false},
		{"softmax last", [][]int{{2, 5}}, one(func(x *mx.Array) *mx.Array { return mx.Softmax(x, -1) }), false},
		{"softmax axis 0", [][]int{{3, 2}}, one(func(x *mx.Array) *mx.Array { return mx.Softmax(x, 0) }), false},
		{"logsumexp", [][]int{{2, 5}}, one(func(x *mx.Array) *mx.Array { return mx.LogSumExp(x, []int{-1}, false) }), false},
		{"logsumexp all", [][]int{{2, 3}}, one(func(x *mx.Array) *mx.Array { return mx.LogSumExp(x, nil, false) }), false},
		{"matmul", [][]int{{2, 3, 4}, {4, 5}}, two(mx.Matmul), false},
		{"matmul batch × weightᵀ", [][]int{{2, 3, 4}, {5, 4}}, two(func(a, b *mx.Array) *mx.Array { return mx.MatmulT(a, b, false, true) }), false},
		{"matmul aᵀ", [][]int{{2, 4, 3}, {2, 4, 5}}, two(func(a, b *mx.Array) *mx.Array { return mx.MatmulT(a, b, true, false) }), false},
		{"matmul bᵀ", [][]int{{3, 4}, {2, 5, 4}}, two(func(a, b *mx.Array) *mx.Array { return mx.MatmulT(a, b, false, true) }), false},
		{"matmul aᵀbᵀ", [][]int{{4, 3}, {5, 4}}, two(func(a, b *mx.Array) *mx.Array { return mx.MatmulT(a, b, true, true) }), false},
		{"add_low_rank", [][]int{{1, 2, 5}, {1, 2, 4}, {4, 3}, {3, 5}}, func(x []*mx.Array) *mx.Array { return mx.AddLowRank(x[0], x[1], x[2], x[3], 1.5) }, false},
		{"reshape", [][]int{{2, 6}}, one(func(x *mx.Array) *mx.Array { return mx.Reshape(x, 3, 4) }), false},
		{"transpose", [][]int{{2, 3, 4}}, one(func(x *mx.Array) *mx.Array { return mx.Transpose(x, 1, 2, 0) }), false},
		{"broadcast", [][]int{{3, 1}}, one(func(x *mx.Array) *mx.Array { return mx.Broadcast(x, []int{2, 3, 4}) }), false},
		{"slice step", [][]int{{4, 5}}, one(func(x *mx.Array) *mx.Array { return mx.SliceStep(x, []int{1, 0}, []int{4, 5}, []int{2, 2}) }), false},
		{"slice update", [][]int{{4, 5}, {2, 2}}, two(func(a, b *mx.Array) *mx.Array { return mx.SliceUpdate(a, b, []int{1, 1}, []int{2, 3}) }), false},
		{"concatenate", [][]int{{2, 1}, {2, 3}}, func(x []*mx.Array) *mx.Array { return mx.Concatenate(x, 1) }, false},
		{"take", [][]int{{3, 2}}, one(func(x *mx.Array) *mx.Array { return mx.Take(x, ids, 0) }), false},
		{"take along", [][]int{{2, 3, 4}}, one(func(x *mx.Array) *mx.Array { return mx.TakeAlongAxis(x, along, 2) }), false},
		{"where", [][]int{{2, 3}, {3}}, two(func(a, b *mx.Array) *mx.Array { return mx.Where(cond, a, b) }), false},
		{"rms_norm", [][]int{{3, 8}, {8}}, two(func(x, w *mx.Array) *mx.Array { return mx.RMSNorm(x, w, 1e-5) }), false},
		{"rms_norm frozen weight", [][]int{{2, 3, 8}}, one(func(x *mx.Array) *mx.Array { return mx.RMSNorm(x, s.randn(41, 8), 1e-5) }), false},
		{"rms_norm frozen input", [][]int{{8}}, one(func(w *mx.Array) *mx.Array { return mx.RMSNorm(s.randn(42, 3, 8), w, 1e-5) }), false},
		{"rope", [][]int{{2, 3, 8}}, one(func(x *mx.Array) *mx.Array {
			return mx.RoPE(x, mx.RoPEOptions{Dims: 6, Base: 10000, Offset: 3})
		}), false},
		{"rope traditional", [][]int{{2, 3, 8}}, one(func(x *mx.Array) *mx.Array {
			return mx.RoPE(x, mx.RoPEOptions{Dims: 8, Traditional: true, Base: 500, Scale: 2})
		}), false},
		{"sdpa gqa causal", [][]int{{1, 4, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}}, func(x []*mx.Array) *mx.Array {
			return mx.ScaledDotProductAttention(x[0], x[1], x[2], 0.5, true, nil)
		}, false},
		{"sdpa fixed mask", [][]int{{2, 2, 3, 4}, {2, 1, 4, 4}, {2, 1, 4, 2}}, func(x []*mx.Array) *mx.Array {
			return mx.ScaledDotProductAttention(x[0], x[1], x[2], 0.7, true, s.randn(77, 1, 2, 1, 4))
		}, false},
		{"sdpa mask", [][]int{{1, 2, 2, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 1, 2, 3}}, func(x []*mx.Array) *mx.Array {
			return mx.ScaledDotProductAttention(x[0], x[1], x[2], 0.5, false, x[3])
		}, false},
		{"cross_entropy", [][]int{{2, 3, 4}}, one(func(x *mx.Array) *mx.Array {
			return mx.CrossEntropy(x, s.ints([]int32{0, 3, 1, 2, 2, 0}, 2, 3))
		}), false},
		{"cross_entropy masked", [][]int{{2, 3, 4}}, one(func(x *mx.Array) *mx.Array {
			return mx.CrossEntropyMasked(x, s.ints([]int32{0, 3, 1, 2, 2, 0}, 2, 3), s.arr([]float32{1, 0, 1, 1, 1, 0}, 2, 3))
		}), false},
		{"quantized_matmul x", [][]int{{3, 64}}, one(func(x *mx.Array) *mx.Array { return mx.QuantizedMatmul(x, wq, sc, bi, true, 32, 4) }), false},
		{"quantized_matmul xᵀ", [][]int{{2, 6}}, one(func(x *mx.Array) *mx.Array { return mx.QuantizedMatmul(x, wq, sc, bi, false, 32, 4) }), false},
		{"shared input", [][]int{{3}}, one(func(x *mx.Array) *mx.Array { return mx.Mul(mx.Exp(x), mx.Tanh(x)) }), false},
	}
	if _, ok := s.b.(mx.CumSummer); ok {
		cases = append(cases,
			gradCase{"cumsum", [][]int{{2, 5}}, one(func(x *mx.Array) *mx.Array { return mx.CumSum(x, -1, false) }), false},
			gradCase{"cumsum reverse axis 0", [][]int{{4, 3}}, one(func(x *mx.Array) *mx.Array { return mx.CumSum(x, 0, true) }), false})
	}
	return cases
}

func (s *suite) gradients(t *testing.T) {
	for ci, c := range s.gradCases() {
		t.Run(c.name, func(t *testing.T) { s.checkGrad(t, uint64(100+ci), c) })
	}
	// StopGradient: d/da Σ a·exp(b) = exp(b), and nothing reaches b.
	a, b := s.arr([]float32{1, 2, 3}, 3), s.arr([]float32{0, 1, -1}, 3)
	_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
		return []*mx.Array{mx.Sum(mx.Mul(p[0], mx.StopGradient(mx.Exp(p[1]))), nil, false)}
	}, []*mx.Array{a, b})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "stop_gradient passes", g[0], []int{3}, []float64{1, math.E, 1 / math.E}, 1e-6, 1e-6)
	expect(t, "stop_gradient blocks", g[1], []int{3}, []float64{0, 0, 0}, 0, 0)
}

// crossEntropyFused: CrossEntropy's gradient (one backend op where the backend has
// CrossEntropyGrader) equals, bit for bit, the gradient through the ops it is made of,
// across rows long enough to be split over cores and with targets at both ends.
func (s *suite) crossEntropyFused(t *testing.T) {
	for _, sh := range [][2]int{{6, 7}, {5, 9000}} {
		rows, v := sh[0], sh[1]
		x := s.arr(func() []float32 {
			r := randn(41, rows*v)
			for i := range r {
				r[i] *= 4
			}
			return r
		}(), rows, v)
		tg := make([]int32, rows)
		for i := range tg {
			tg[i] = int32((i * 7919) % v)
		}
		tg[0], tg[rows-1] = 0, int32(v-1)
		targets, w := s.ints(tg, rows), s.randn(43, rows)
		grad := func(ce func(x *mx.Array) *mx.Array) []float64 {
			_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
				return []*mx.Array{mx.Sum(mx.Mul(ce(p[0]), w), nil, false)}
			}, []*mx.Array{x})
			if err != nil {
				t.Fatal(err)
			}
			return get(t, g[0])
		}
		fused := grad(func(x *mx.Array) *mx.Array { return mx.CrossEntropy(x, targets) })
		composed := grad(func(x *mx.Array) *mx.Array {
			picked := mx.Squeeze(mx.TakeAlongAxis(x, mx.ExpandDims(targets, -1), -1), -1)
			return mx.Sub(mx.LogSumExp(x, []int{-1}, false), picked)
		})
		for i := range fused {
			if fused[i] != composed[i] {
				t.Fatalf("%dx%d: gradient [%d] = %v, composed %v", rows, v, i, fused[i], composed[i])
			}
		}
	}
}

// checkGrad compares ValueAndGrad with central differences, each function value
// accumulated in float64 from the float32 outputs.
func (s *suite) checkGrad(t *testing.T, seed uint64, c gradCase) {
	vals := make([][]float32, len(c.shapes))
	xs := make([]*mx.Array, len(c.shapes))
	for i, sh := range c.shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		vals[i] = randn(seed+uint64(i)*31, n)
		if c.positive {
			for j := range vals[i] {
				vals[i][j] = 0.5 + 1.5*float32(math.Abs(float64(vals[i][j])))/3
			}
		}
		// Keep values off the kinks of abs, max and min.
		for j := range vals[i] {
			if math.Abs(float64(vals[i][j])) < 0.05 {
				vals[i][j] += 0.1
			}
		}
		xs[i] = s.arr(vals[i], sh...)
	}
	y := c.f(xs)
	if err := y.Err(); err != nil {
		t.Fatalf("forward: %v", err)
	}
	r := s.randn(seed+999, y.Shape()...)
	rv := get(t, r)
	loss := func(in []*mx.Array) *mx.Array { return mx.Sum(mx.Mul(c.f(in), r), nil, false) }
	_, grads, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{loss(p)} }, xs)
	if err != nil {
		t.Fatalf("value and grad: %v", err)
	}
	f64loss := func(in []*mx.Array) float64 {
		out := get(t, c.f(in))
		var s float64
		for i, v := range out {
			s += v * rv[i]
		}
		return s
	}
	const eps = 1e-2
	for i := range xs {
		g := get(t, grads[i])
		if len(g) != len(vals[i]) {
			t.Fatalf("input %d: gradient has %d values, want %d", i, len(g), len(vals[i]))
		}
		for j := range vals[i] {
			fd := func(delta float32) float64 {
				p := append([]float32(nil), vals[i]...)
				p[j] += delta
				in := append([]*mx.Array(nil), xs...)
				in[i] = s.arr(p, c.shapes[i]...)
				return f64loss(in)
			}
			num := (fd(eps) - fd(-eps)) / (2 * eps)
			if math.Abs(num-g[j]) > 5e-3+1e-2*math.Abs(num) {
				t.Errorf("input %d element %d: autodiff %.6g, finite difference %.6g", i, j, g[j], num)
			}
		}
	}
}
