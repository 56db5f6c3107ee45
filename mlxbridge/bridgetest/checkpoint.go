package bridgetest

import (
	"fmt"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// checkpoints: a loss computed through Checkpoint or CheckpointScalar has the
// value and the gradients of the same loss computed plainly, for every
// parameter: those that reach the function as its argument and those it
// closes over, through chains of checkpoints, nested ones, and loss chunks.
func (s *suite) checkpoints(t *testing.T) {
	const rows, dim, hid, vocab = 6, 5, 7, 9
	targets := s.ints([]int32{1, 8, 0, 4, 4, 2}, rows)
	mask := s.arr([]float32{1, 1, 0, 1, 1, 1}, rows)
	// params: x0, then per block w1 (dim, hid) and w2 (hid, dim), then the
	// output projection (dim, vocab).
	const blocks = 3
	params := []*mx.Array{s.randn(1, rows, dim)}
	for k := range blocks {
		params = append(params, mx.MulScalar(s.randn(uint64(10+2*k), dim, hid), 0.5), mx.MulScalar(s.randn(uint64(11+2*k), hid, dim), 0.5))
	}
	params = append(params, s.randn(99, dim, vocab))

	// block k: x + tanh(x·w1)·w2, its weights closed over.
	block := func(p []*mx.Array, k int) func(*mx.Array) *mx.Array {
		return func(x *mx.Array) *mx.Array {
			return mx.Add(x, mx.Matmul(mx.Tanh(mx.Matmul(x, p[1+2*k])), p[2+2*k]))
		}
	}
	// chunkLoss is the summed masked cross-entropy of rows [a, b).
	chunkLoss := func(p []*mx.Array, a, b int) func(*mx.Array) *mx.Array {
		return func(h *mx.Array) *mx.Array {
			logits := mx.Matmul(h, p[len(p)-1])
			ce := mx.CrossEntropy(logits, mx.SliceAxis(targets, 0, a, b))
			return mx.Sum(mx.Mul(ce, mx.SliceAxis(mask, 0, a, b)), nil, false)
		}
	}
	type variant struct {
		name                 string
		blockCkpt, nest      bool
		chunk                int // rows per loss chunk; 0: one plain loss
		scalar, frozenOutput bool
	}
	loss := func(v variant) func(p []*mx.Array) []*mx.Array {
		return func(p []*mx.Array) []*mx.Array {
			h := mx.MulScalar(p[0], 1.5) // a traced input made before the first checkpoint
			for k := range blocks {
				f := block(p, k)
				switch {
				case v.nest && k == 1:
					inner := f
					f = func(x *mx.Array) *mx.Array { return mx.Checkpoint(inner, mx.Neg(mx.Neg(x))) }
					h = mx.Checkpoint(f, h)
				case v.blockCkpt:
					h = mx.Checkpoint(f, h)
				default:
					h = f(h)
				}
			}
			q := p
			if v.frozenOutput {
				q = append(append([]*mx.Array{}, p[:len(p)-1]...), mx.StopGradient(p[len(p)-1]))
			}
			if v.chunk == 0 {
				return []*mx.Array{chunkLoss(q, 0, rows)(h)}
			}
			var total *mx.Array
			for a := 0; a < rows; a += v.chunk {
				b := min(a+v.chunk, rows)
				f := chunkLoss(q, a, b)
				hc := mx.SliceAxis(h, 0, a, b)
				var part *mx.Array
				if v.scalar {
					part = mx.CheckpointScalar(f, hc)
				} else {
					part = mx.Checkpoint(f, hc)
				}
				if total == nil {
					total = part
				} else {
					total = mx.Add(total, part)
				}
			}
			return []*mx.Array{total}
		}
	}
	grads := func(v variant) (float64, [][]float64) {
		outs, gs, err := mx.ValueAndGrad(loss(v), params)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		out := make([][]float64, len(gs))
		for i, g := range gs {
			out[i] = get(t, g)
		}
		return get(t, outs[0])[0], out
	}
	for _, frozen := range []bool{false, true} {
		plainLoss, plain := grads(variant{name: "plain", frozenOutput: frozen})
		for _, v := range []variant{
			{name: "blocks", blockCkpt: true},
			{name: "nested", nest: true},
			{name: "blocks and nested", blockCkpt: true, nest: true},
			{name: "loss chunks", chunk: 4},
			{name: "loss chunks, scalar", chunk: 2, scalar: true},
			{name: "everything", blockCkpt: true, nest: true, chunk: 4, scalar: true},
		} {
			v.frozenOutput = frozen
			name := fmt.Sprintf("%s, output projection trained %v", v.name, !frozen)
			t.Run(name, func(t *testing.T) {
				l, g := grads(v)
				if _, ok := closeTo([]float64{l}, []float64{plainLoss}, 1e-5, 1e-5); !ok {
					t.Errorf("loss %g, plainly %g", l, plainLoss)
				}
				for i := range g {
					if i == len(g)-1 && frozen {
						if _, ok := closeTo(g[i], make([]float64, len(g[i])), 0, 0); !ok {
							t.Errorf("a frozen output projection got a gradient")
						}
						continue
					}
					if j, ok := closeTo(g[i], plain[i], 1e-5, 1e-4); !ok {
						t.Errorf("param %d: gradient[%d] %g, plainly %g", i, j, g[i][j], plain[i][j])
					}
				}
			})
		}
	}

	// Nothing traced: the function's value, and no graph.
	x := s.randn(5, 2, dim)
	y := mx.Checkpoint(block(params, 0), x)
	expect(t, "untraced checkpoint", y, []int{2, dim}, get(t, block(params, 0)(x)), 0, 0)
	// An error in the function comes out as the result.
	bad := mx.Checkpoint(func(x *mx.Array) *mx.Array { return mx.Matmul(x, x) }, x)
	if bad.Err() == nil {
		t.Errorf("checkpoint of a failing function gave %s", bad)
	}
}

// run: ops issued inside mlxbridge.Run compute what they compute outside it,
// a differentiation inside it works, and a panic in it reaches the caller.
func (s *suite) run(t *testing.T) {
	x := s.arr([]float32{1, 2, 3}, 3)
	var y *mx.Array
	var g []*mx.Array
	var err error
	mx.Run(s.b, func() {
		y = mx.Mul(mx.Add(x, x), x)
		if err = mx.Eval(y); err != nil {
			return
		}
		_, g, err = mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			return []*mx.Array{mx.Sum(mx.Square(p[0]), nil, false)}
		}, []*mx.Array{x})
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "inside Run", y, []int{3}, []float64{2, 8, 18}, 0, 0)
	expect(t, "gradient inside Run", g[0], []int{3}, []float64{2, 4, 6}, 0, 0)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("a panic inside Run came out as %v", r)
			}
		}()
		mx.Run(s.b, func() { panic("boom") })
	}()
	// The backend still works after the panic.
	expect(t, "after a panic", mx.Add(x, x), []int{3}, []float64{2, 4, 6}, 0, 0)
}
