package bridgetest

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// values checks ops against numbers worked out by hand.
func (s *suite) values(t *testing.T) {
	x := s.arr([]float32{-1, 0, 1, 2}, 4)
	const tol = 2e-6
	cases := []struct {
		name string
		got  *mx.Array
		want []float64
	}{
		{"neg", mx.Neg(x), []float64{1, 0, -1, -2}},
		{"exp", mx.Exp(x), []float64{1 / math.E, 1, math.E, math.E * math.E}},
		{"square", mx.Square(x), []float64{1, 0, 1, 4}},
		{"abs", mx.Abs(x), []float64{1, 0, 1, 2}},
		{"sign", mx.Sign(x), []float64{-1, 0, 1, 1}},
		{"sigmoid", mx.Sigmoid(x), []float64{0.2689414213699951, 0.5, 0.7310585786300049, 0.8807970779778823}},
		{"tanh", mx.Tanh(x), []float64{-0.7615941559557649, 0, 0.7615941559557649, 0.9640275800758169}},
		// silu(x) = x·sigmoid(x)
		{"silu", mx.Silu(x), []float64{-0.2689414213699951, 0, 0.7310585786300049, 1.7615941559557649}},
		// gelu(1) = Φ(1) = 0.8413447460685429; gelu(2) = 2Φ(2)
		{"gelu", mx.Gelu(x), []float64{-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416}},
		{"gelu_approx", mx.GeluApprox(x), []float64{-0.15880800939172324, 0, 0.8411919906082768, 1.954597694087775}},
		{"log", mx.Log(s.arr([]float32{1, math.E, 0.5}, 3)), []float64{0, 1, -math.Ln2}},
		{"sqrt", mx.Sqrt(s.arr([]float32{4, 2, 0}, 3)), []float64{2, math.Sqrt2, 0}},
		{"rsqrt", mx.Rsqrt(s.arr([]float32{4, 0.25}, 2)), []float64{0.5, 2}},
		{"add broadcast", mx.Add(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), s.arr([]float32{10, 20, 30}, 3)), []float64{11, 22, 33, 14, 25, 36}},
		{"sub column", mx.Sub(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), s.arr([]float32{1, 4}, 2, 1)), []float64{0, 1, 2, 0, 1, 2}},
		{"mul outer", mx.Mul(s.arr([]float32{1, 2}, 2, 1), s.arr([]float32{3, 4, 5}, 1, 3)), []float64{3, 4, 5, 6, 8, 10}},
		{"div", mx.Div(s.arr([]float32{1, 3}, 2), s.arr([]float32{4, 2}, 2)), []float64{0.25, 1.5}},
		{"maximum", mx.Maximum(x, s.arr([]float32{0.5}, 1)), []float64{0.5, 0.5, 1, 2}},
		{"minimum", mx.Minimum(x, s.arr([]float32{0.5}, 1)), []float64{-1, 0, 0.5, 0.5}},
		{"power", mx.Power(s.arr([]float32{2, 9}, 2), s.arr([]float32{3, 0.5}, 2)), []float64{8, 3}},
		{"greater", mx.AsType(mx.Greater(x, s.arr([]float32{0}, 1)), mx.Float32), []float64{0, 0, 1, 1}},
		{"equal", mx.AsType(mx.Equal(x, s.arr([]float32{1}, 1)), mx.Float32), []float64{0, 0, 1, 0}},
		{"sum all", mx.Sum(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), nil, false), []float64{21}},
		{"sum axis 0", mx.Sum(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), []int{0}, false), []float64{5, 7, 9}},
		{"mean axis -1", mx.Mean(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), []int{-1}, false), []float64{2, 5}},
		{"max axis 0", mx.Max(s.arr([]float32{1, 7, 3, 4, 5, 6}, 2, 3), []int{0}, false), []float64{4, 7, 6}},
		{"min all", mx.Min(s.arr([]float32{1, 7, -3, 4, 5, 6}, 2, 3), nil, false), []float64{-3}},
		// softmax([0, ln 2, ln 3]) = [1, 2, 3]/6
		{"softmax", mx.Softmax(s.arr([]float32{0, math.Ln2, float32(math.Log(3))}, 3), -1), []float64{1.0 / 6, 2.0 / 6, 3.0 / 6}},
		{"logsumexp", mx.LogSumExp(s.arr([]float32{0, math.Ln2, float32(math.Log(3))}, 3), nil, false), []float64{math.Log(6)}},
		{"logsumexp huge", mx.LogSumExp(s.arr([]float32{1000, 1000}, 2), nil, false), []float64{1000 + math.Ln2}},
		{"matmul", mx.Matmul(s.arr([]float32{1, 2, 3, 4}, 2, 2), s.arr([]float32{5, 6, 7, 8}, 2, 2)), []float64{19, 22, 43, 50}},
		{"matmul aᵀ", mx.MatmulT(s.arr([]float32{1, 2, 3, 4}, 2, 2), s.arr([]float32{5, 6, 7, 8}, 2, 2), true, false), []float64{26, 30, 38, 44}},
		{"matmul bᵀ", mx.MatmulT(s.arr([]float32{1, 2, 3, 4}, 2, 2), s.arr([]float32{5, 6, 7, 8}, 2, 2), false, true), []float64{17, 23, 39, 53}},
		{"transpose", mx.Transpose(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3)), []float64{1, 4, 2, 5, 3, 6}},
		{"slice", mx.Slice(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), []int{0, 1}, []int{2, 3}), []float64{2, 3, 5, 6}},
		{"slice step", mx.SliceStep(s.arr([]float32{0, 1, 2, 3, 4, 5, 6}, 7), []int{1}, []int{7}, []int{2}), []float64{1, 3, 5}},
		{"slice negative", mx.SliceAxis(s.arr([]float32{0, 1, 2, 3}, 4), 0, -2, 4), []float64{2, 3}},
		{"slice update", mx.SliceUpdate(s.arr(make([]float32, 4), 2, 2), s.arr([]float32{7, 8}, 1, 2), []int{1, 0}, nil), []float64{0, 0, 7, 8}},
		{"concatenate", mx.Concatenate([]*mx.Array{s.arr([]float32{1, 2}, 2, 1), s.arr([]float32{3, 4, 5, 6}, 2, 2)}, 1), []float64{1, 3, 4, 2, 5, 6}},
		{"stack", mx.Stack([]*mx.Array{s.arr([]float32{1, 2}, 2), s.arr([]float32{3, 4}, 2)}, 0), []float64{1, 2, 3, 4}},
		{"broadcast", mx.Broadcast(s.arr([]float32{1, 2}, 2, 1), []int{2, 3}), []float64{1, 1, 1, 2, 2, 2}},
		{"take rows", mx.Take(s.arr([]float32{1, 2, 3, 4, 5, 6}, 3, 2), s.ints([]int32{2, 0, 2}, 3), 0), []float64{5, 6, 1, 2, 5, 6}},
		{"take cols", mx.Take(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), s.ints([]int32{1}, 1), 1), []float64{2, 5}},
		{"take along", mx.TakeAlongAxis(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), s.ints([]int32{2, 0}, 2, 1), 1), []float64{3, 4}},
		{"where", mx.Where(mx.Greater(x, s.arr([]float32{0}, 1)), x, s.arr([]float32{-9}, 1)), []float64{-9, -9, 1, 2}},
		{"argmax", mx.AsType(mx.ArgMax(s.arr([]float32{1, 9, 3, 7, 5, 6}, 2, 3), -1, false), mx.Float32), []float64{1, 0}},
		// rms of [3, 4] is sqrt(12.5); eps 0
		{"rms_norm", mx.RMSNorm(s.arr([]float32{3, 4}, 1, 2), s.arr([]float32{1, 2}, 2), 0), []float64{3 / math.Sqrt(12.5), 8 / math.Sqrt(12.5)}},
		// one pair at position 1 (offset 1, row 0), base irrelevant for i=0: turn by 1 radian
		{"rope", mx.RoPE(s.arr([]float32{1, 0}, 1, 2), mx.RoPEOptions{Dims: 2, Base: 10000, Offset: 1}), []float64{math.Cos(1), math.Sin(1)}},
		// cross entropy of uniform logits over 4 classes is ln 4
		{"cross_entropy", mx.CrossEntropy(s.arr([]float32{0, 0, 0, 0}, 1, 4), s.ints([]int32{2}, 1)), []float64{math.Log(4)}},
		// one query attends equally to two keys with equal scores: the mean of the values
		{"sdpa", mx.ScaledDotProductAttention(s.arr([]float32{1, 0}, 1, 1, 1, 2), s.arr([]float32{0, 1, 0, -1}, 1, 1, 2, 2),
			s.arr([]float32{2, 4, 6, 8}, 1, 1, 2, 2), 1, false, nil), []float64{4, 6}},
		// causal: the first query sees only the first key
		{"sdpa causal", mx.ScaledDotProductAttention(s.arr([]float32{1, 0, 1, 0}, 1, 1, 2, 2), s.arr([]float32{0, 1, 0, -1}, 1, 1, 2, 2),
			s.arr([]float32{2, 4, 6, 8}, 1, 1, 2, 2), 1, true, nil), []float64{2, 4, 4, 6}},
	}
	for _, c := range cases {
		expect(t, c.name, c.got, c.got.Shape(), c.want, tol, tol)
	}
	// A few shapes worth asserting on their own.
	expect(t, "sum keep", mx.Sum(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), []int{1}, true), []int{2, 1}, []float64{6, 15}, tol, 0)
	expect(t, "expand", mx.ExpandDims(s.arr([]float32{1, 2}, 2), 0), []int{1, 2}, []float64{1, 2}, 0, 0)
	expect(t, "reshape -1", mx.Reshape(s.arr([]float32{1, 2, 3, 4, 5, 6}, 2, 3), 3, -1), []int{3, 2}, []float64{1, 2, 3, 4, 5, 6}, 0, 0)
	expect(t, "take 2-d ids", mx.Take(s.arr([]float32{1, 2, 3, 4, 5, 6}, 3, 2), s.ints([]int32{1, 2, 0, 1}, 2, 2), 0), []int{2, 2, 2},
		[]float64{3, 4, 5, 6, 1, 2, 3, 4}, 0, 0)

	// Random numbers are a pure function of the seed.
	a, b := get(t, mx.RandomNormal(42, 100)), get(t, mx.RandomNormal(42, 100))
	if i, ok := closeTo(a, b, 0, 0); !ok {
		t.Errorf("random normal: same seed differs at %d", i)
	}
	var mean, sq float64
	for _, v := range get(t, mx.RandomNormal(1, 10000)) {
		mean += v / 10000
		sq += v * v / 10000
	}
	if math.Abs(mean) > 0.05 || math.Abs(sq-1) > 0.05 {
		t.Errorf("random normal: mean %.3f, E[x²] %.3f; want 0, 1", mean, sq)
	}
	for _, v := range get(t, mx.RandomUniform(3, -2, 5, 1000)) {
		if v < -2 || v >= 5 {
			t.Fatalf("random uniform: %g outside [-2, 5)", v)
		}
	}
	// StopGradient passes values through.
	expect(t, "stop_gradient", mx.StopGradient(x), []int{4}, []float64{-1, 0, 1, 2}, 0, 0)
}

// concatenate joins parts along each axis of a 4-D shape, a KV cache's (B, H, S, D)
// among them, with a part empty along the axis, in float32 and int32, against the
// values placed by index.
func (s *suite) concatenate(t *testing.T) {
	base := []int{2, 3, 4, 5}
	for axis := range base {
		sizes := []int{2, 0, 3, 1}
		var parts, iparts []*mx.Array
		var shapes [][]int
		for i, n := range sizes {
			sh := append([]int(nil), base...)
			sh[axis] = n
			shapes = append(shapes, sh)
			parts = append(parts, s.randn(uint64(40+i), sh...))
			vals := get(t, parts[i])
			iv := make([]int32, len(vals))
			for j := range vals {
				iv[j] = int32(1000*i + j)
			}
			iparts = append(iparts, s.ints(iv, sh...))
		}
		out := append([]int(nil), base...)
		out[axis] = 6
		want, iwant := make([]float64, 2*3*4*5/base[axis]*6), make([]float64, 2*3*4*5/base[axis]*6)
		at := 0
		for i, sh := range shapes {
			vals := get(t, parts[i])
			for j := range vals {
				idx := unravel(j, sh)
				idx[axis] += at
				k := ravel(idx, out)
				want[k], iwant[k] = vals[j], float64(1000*i+j)
			}
			at += sizes[i]
		}
		expect(t, fmt.Sprintf("concatenate axis %d", axis), mx.Concatenate(parts, axis), out, want, 0, 0)
		expect(t, fmt.Sprintf("concatenate int32 axis %d", axis), mx.AsType(mx.Concatenate(iparts, axis), mx.Float32), out, iwant, 0, 0)
	}
}

// unravel is the index of element j of a row-major shape; ravel its inverse.
func unravel(j int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d], j = j%shape[d], j/shape[d]
	}
	return idx
}

func ravel(idx, shape []int) int {
	k := 0
	for d := range shape {
		k = k*shape[d] + idx[d]
	}
	return k
}
