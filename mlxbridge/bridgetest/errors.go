package bridgetest

import (
	"math"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// errors checks that bad shapes and arguments come back as errors naming the problem,
// and that an error sticks through later ops.
func (s *suite) errors(t *testing.T) {
	a23, a4 := s.randn(1, 2, 3), s.randn(2, 4)
	cases := []struct {
		name string
		got  *mx.Array
		want string
	}{
		{"add", mx.Add(a23, a4), "do not broadcast"},
		{"matmul inner", mx.Matmul(a23, s.randn(3, 4, 2)), "inner dimensions"},
		{"matmul 1-d", mx.Matmul(a4, a4), "2 or more dimensions"},
		{"reshape", mx.Reshape(a23, 4, 2), "cannot reshape"},
		{"axis", mx.Sum(a23, []int{2}, false), "out of range"},
		{"repeated axis", mx.Sum(a23, []int{1, -1}, false), "repeated"},
		{"transpose", mx.Transpose(a23, 0, 0), "bad perm"},
		{"take range", mx.Take(a23, s.ints([]int32{5}, 1), 0), "out of range"},
		{"take negative", mx.Take(a23, s.ints([]int32{-1}, 1), 1), "out of range"},
		{"take float ids", mx.Take(a23, a4, 0), "indices must be"},
		{"concatenate", mx.Concatenate([]*mx.Array{a23, a4}, 0), "concatenate"},
		{"slice step", mx.SliceStep(a23, []int{0, 0}, []int{2, 3}, []int{1, 0}), "step"},
		{"slice update", mx.SliceUpdate(a23, s.randn(3, 2, 2), []int{1, 2}, nil), "outside"},
		{"rms weight", mx.RMSNorm(a23, a4, 1e-5), "weight"},
		{"rope odd", mx.RoPE(a23, mx.RoPEOptions{Dims: 3, Base: 10000}), "rope"},
		{"sdpa heads", mx.ScaledDotProductAttention(s.randn(4, 1, 3, 2, 4), s.randn(5, 1, 2, 2, 4), s.randn(6, 1, 2, 2, 4), 1, false, nil), "do not fit"},
		{"attend parts", mx.AttendParts(s.randn(4, 1, 2, 1, 4), []*mx.Array{s.randn(5, 1, 2, 2, 4)}, []*mx.Array{s.randn(6, 1, 2, 3, 4)}, 1), "do not fit"},
		{"attend parts count", mx.AttendParts(s.randn(4, 1, 2, 1, 4), []*mx.Array{s.randn(5, 1, 2, 2, 4)}, nil, 1), "parts"},
		{"attend parts queries", mx.AttendParts(s.randn(4, 1, 2, 3, 4), []*mx.Array{s.randn(5, 1, 2, 2, 4)}, []*mx.Array{s.randn(6, 1, 2, 2, 4)}, 1), "queries over"},
		{"attend quantized packed", func() *mx.Array {
			kw, ks, kb := mx.Quantize(s.randn(7, 1, 2, 3, 64), 64, 8)
			vw, vs, vb := mx.Quantize(s.randn(8, 1, 2, 4, 64), 64, 8)
			return mx.AttendQuantized(s.randn(9, 1, 2, 1, 64), mx.QuantizedKV{W: kw, Scales: ks, Biases: kb}, mx.QuantizedKV{W: vw, Scales: vs, Biases: vb}, 64, 8, nil, nil, 1)
		}(), "do not fit"},
		{"attend quantized head", func() *mx.Array {
			w, sc, b := mx.Quantize(s.randn(7, 1, 2, 3, 64), 64, 8)
			kv := mx.QuantizedKV{W: w, Scales: sc, Biases: b}
			return mx.AttendQuantized(s.randn(9, 1, 2, 1, 128), kv, kv, 64, 8, nil, nil, 1)
		}(), "do not fit"},
		{"attend quantized parts", func() *mx.Array {
			w, sc, b := mx.Quantize(s.randn(7, 1, 2, 3, 64), 64, 8)
			kv := mx.QuantizedKV{W: w, Scales: sc, Biases: b}
			return mx.AttendQuantized(s.randn(9, 1, 2, 1, 64), kv, kv, 64, 8, []*mx.Array{s.randn(5, 1, 2, 2, 64)}, nil, 1)
		}(), "parts"},
		{"cross entropy", mx.CrossEntropy(a23, s.ints([]int32{0, 1, 2}, 3)), "targets"},
		{"from data count", mx.FromData(s.b, mx.Float32, []float32{1, 2}, 3), "2 values"},
		{"from data shape", mx.FromData(s.b, mx.Float32, []float32{}, -1), "negative"},
		{"int arithmetic", mx.Exp(s.ints([]int32{1}, 1)), "float"},
		{"sticky", mx.Exp(mx.Mul(mx.Add(a23, a4), a23)), "do not broadcast"},
		{"nil", mx.Exp(nil), "nil array"},
	}
	for _, c := range cases {
		err := c.got.Err()
		if err == nil {
			t.Errorf("%s: no error, got %s", c.name, c.got)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.want)
		}
		if _, rerr := c.got.Float32s(); rerr == nil {
			t.Errorf("%s: readback of an error array succeeded", c.name)
		}
	}
	if err := mx.Eval(a23, mx.Add(a23, a4)); err == nil {
		t.Errorf("eval: no error for a bad array")
	}
	// ValueAndGrad reports bad losses and bad functions as errors.
	p := []*mx.Array{s.randn(7, 3)}
	if _, _, err := mx.ValueAndGrad(func(x []*mx.Array) []*mx.Array { return []*mx.Array{mx.Exp(x[0])} }, p); err == nil || !strings.Contains(err.Error(), "scalar") {
		t.Errorf("value and grad of a vector: got %v, want a scalar error", err)
	}
	if _, _, err := mx.ValueAndGrad(func(x []*mx.Array) []*mx.Array { panic("boom") }, p); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("value and grad of a panicking f: got %v", err)
	}
	if _, _, err := mx.ValueAndGrad(func(x []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(mx.Add(x[0], a4), nil, false)} }, p); err == nil {
		t.Errorf("value and grad with a shape error: no error")
	}
	// A param the loss does not use gets zeros; aux outputs come back as values.
	outs, grads, err := mx.ValueAndGrad(func(x []*mx.Array) []*mx.Array {
		return []*mx.Array{mx.Sum(mx.Square(x[0]), nil, false), mx.Scalar(7)}
	}, []*mx.Array{s.arr([]float32{1, 2}, 2), s.arr([]float32{5}, 1)})
	if err != nil {
		t.Fatalf("value and grad: %v", err)
	}
	expect(t, "value", outs[0], []int{}, []float64{5}, 1e-6, 0)
	expect(t, "aux", outs[1], []int{}, []float64{7}, 0, 0)
	expect(t, "grad", grads[0], []int{2}, []float64{2, 4}, 1e-6, 0)
	expect(t, "unused grad", grads[1], []int{1}, []float64{0}, 0, 0)
}

// dtypes checks storage dtypes: values round to their precision, integers convert exactly.
func (s *suite) dtypes(t *testing.T) {
	h := mx.FromData(s.b, mx.Float16, []float32{1.0009765625, 65504, 70000, 1e-8, 0.1}, 5)
	expect(t, "float16", h, []int{5}, []float64{1.0009765625, 65504, math.Inf(1), 0, 0.0999755859375}, 0, 0)
	bf := mx.FromData(s.b, mx.BFloat16, []float32{1.00390625, 1.01171875, 3.14159}, 3)
	// 1+2^-8 is a tie between 1 and 1+2^-7 and goes to the even 1; 3.14159 -> 3.140625
	expect(t, "bfloat16", bf, []int{3}, []float64{1, 1.015625, 3.140625}, 0, 0)
	if bf.DType() != mx.BFloat16 || mx.Add(bf, bf).DType() != mx.BFloat16 || mx.Add(bf, h).DType() != mx.Float32 {
		t.Errorf("dtype promotion: bf16+bf16 gives %s, bf16+f16 gives %s", mx.Add(bf, bf).DType(), mx.Add(bf, h).DType())
	}
	i := mx.AsType(s.arr([]float32{-2.7, 0, 3.9}, 3), mx.Int32)
	iv, err := i.Int32s()
	if err != nil || iv[0] != -2 || iv[1] != 0 || iv[2] != 3 {
		t.Errorf("float to int32: got %v %v, want [-2 0 3]", iv, err)
	}
	u := mx.FromData(s.b, mx.Uint32, []uint32{0xffffffff, 7}, 2)
	uv, err := mx.AsType(mx.AsType(u, mx.Int32), mx.Uint32).Uint32s()
	if err != nil || uv[0] != 0xffffffff || uv[1] != 7 {
		t.Errorf("uint32 round trip: got %v %v", uv, err)
	}
	big := mx.FromData(s.b, mx.Int32, []int32{16777217, 16777216}, 2)
	eq, err := mx.Equal(big, mx.FromData(s.b, mx.Int32, []int32{16777216, 16777216}, 2)).Uint8s()
	if err != nil || eq[0] != 0 || eq[1] != 1 {
		t.Errorf("int32 equality must be exact: got %v %v", eq, err)
	}
	taken, err := mx.Take(mx.FromData(s.b, mx.Int32, []int32{10, 11, 12}, 3), s.ints([]int32{2, 2, 0}, 3), 0).Int32s()
	if err != nil || taken[0] != 12 || taken[2] != 10 {
		t.Errorf("int take: got %v %v", taken, err)
	}
}
