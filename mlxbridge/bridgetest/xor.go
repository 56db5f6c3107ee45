package bridgetest

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// xor trains a 2-16-1 MLP on XOR with ValueAndGrad and plain SGD: the smallest
// end-to-end proof that forward, backward and updates fit together.
func (s *suite) xor(t *testing.T) {
	x := s.arr([]float32{0, 0, 0, 1, 1, 0, 1, 1}, 4, 2)
	y := s.arr([]float32{0, 1, 1, 0}, 4, 1)
	params := []*mx.Array{
		mx.MulScalar(s.randn(1, 2, 16), 1), mx.Full(s.b, []int{16}, 0, mx.Float32),
		mx.MulScalar(s.randn(2, 16, 1), 0.5), mx.Full(s.b, []int{1}, 0, mx.Float32),
	}
	loss := func(p []*mx.Array) []*mx.Array {
		h := mx.Tanh(mx.Add(mx.Matmul(x, p[0]), p[1]))
		logit := mx.Add(mx.Matmul(h, p[2]), p[3])
		// Binary cross-entropy from logits: softplus(z) − y·z.
		sp := mx.Log(mx.AddScalar(mx.Exp(logit), 1))
		return []*mx.Array{mx.Mean(mx.Sub(sp, mx.Mul(y, logit)), nil, false), logit}
	}
	var first, last float32
	var logits *mx.Array
	for step := 0; step < 500; step++ {
		outs, grads, err := mx.ValueAndGrad(loss, params)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		l, _ := outs[0].Item()
		if step == 0 {
			first = l
		}
		last, logits = l, outs[1]
		for i := range params {
			params[i] = mx.Sub(params[i], mx.MulScalar(grads[i], 0.5))
		}
	}
	if last > 0.05 || last > first/10 {
		t.Fatalf("xor: loss went from %.4f to %.4f; want below 0.05", first, last)
	}
	z := get(t, logits)
	for i, want := range []bool{false, true, true, false} {
		if (z[i] > 0) != want {
			t.Errorf("xor: input %d classified %v, want %v (logit %.3f)", i, z[i] > 0, want, z[i])
		}
	}
}
