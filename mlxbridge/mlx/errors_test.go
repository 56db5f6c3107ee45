//go:build cgo && (darwin || linux)

package mlx

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// TestMLXErrorsBecomeGoErrors calls the backend directly with arguments mlxbridge
// would have refused, so MLX itself throws: the capturing handler must turn that
// into a Go error (mlx-c's default handler would exit the process) and the
// backend must keep working afterwards.
func TestMLXErrorsBecomeGoErrors(t *testing.T) {
	be := openOrSkip(t)
	x := randn(be, 1, 2, 3)
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"reshape", func() error { _, err := be.Reshape(x, []int{4, 2}); return err }, "reshape"},
		{"matmul", func() error { _, err := be.MatMul(x, x, false, false, []int{2, 3}); return err }, "matmul"},
		{"transpose", func() error { _, err := be.Transpose(x, []int{0, 0}); return err }, "transpose"},
		{"rope dims", func() error {
			_, err := be.RoPE(randn(be, 2, 1, 2, 3), mx.RoPEOptions{Dims: 5, Base: 10000, Scale: 1})
			return err
		}, "rope"},
		{"quantized_matmul", func() error {
			_, err := be.QuantizedMatMul(x, x, x, x, true, 64, 4, []int{2, 2})
			return err
		}, "quantized_matmul"},
	}
	for _, c := range cases {
		err := c.call()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, ".cpp:") {
			t.Errorf("%s: error %q should name the op and not a C++ source location", c.name, msg)
		}
		t.Logf("%s: %v", c.name, err)
	}
	got, err := mx.Add(x, x).Float32s()
	want, _ := x.Float32s()
	if err != nil || len(got) != 6 || got[0] != 2*want[0] {
		t.Errorf("after MLX errors, add gives %v, %v", got, err)
	}
}

// TestValueAndGradErrors covers the callback's error paths: an MLX failure inside
// f, a non-float loss, a panic, and no outputs.
func TestValueAndGradErrors(t *testing.T) {
	be := openOrSkip(t)
	p := []*mx.Array{randn(be, 3, 4)}
	for _, c := range []struct {
		name string
		f    func([]*mx.Array) []*mx.Array
		want string
	}{
		{"mlx error in f", func(x []*mx.Array) []*mx.Array {
			h, err := be.Reshape(x[0], []int{3})
			if err != nil {
				return []*mx.Array{mx.Errorf("%v", err)}
			}
			return []*mx.Array{mx.Wrap(be, h, []int{3}, mx.Float32)}
		}, "reshape"},
		{"int loss", func(x []*mx.Array) []*mx.Array { return []*mx.Array{mx.ArgMax(x[0], 0, false)} }, "float scalar"},
		{"panic", func(x []*mx.Array) []*mx.Array { panic(fmt.Sprintf("bad %d", 42)) }, "bad 42"},
		{"no outputs", func(x []*mx.Array) []*mx.Array { return nil }, "no outputs"},
	} {
		_, _, err := mx.ValueAndGrad(c.f, p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
	// The backend still differentiates afterwards.
	_, g, err := mx.ValueAndGrad(func(x []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(mx.Square(x[0]), nil, false)} }, p)
	if err != nil {
		t.Fatal(err)
	}
	gv, _ := g[0].Float32s()
	pv, _ := p[0].Float32s()
	if gv[1] != 2*pv[1] {
		t.Errorf("d/dx Σx² = %v, want 2x = %v", gv, pv)
	}
}

// TestNestedValueAndGrad differentiates a gradient: the inner ValueAndGrad runs
// inside the outer one's callback, on the worker thread, so it must run directly
// rather than wait for the worker. d/dx Σ(d/dx Σx³) = d/dx Σ3x² = 6x.
func TestNestedValueAndGrad(t *testing.T) {
	be := openOrSkip(t)
	x := mx.FromData(be, mx.Float32, []float32{1, -2, 0.5}, 3)
	_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
		_, inner, err := mx.ValueAndGrad(func(q []*mx.Array) []*mx.Array {
			return []*mx.Array{mx.Sum(mx.Mul(mx.Square(q[0]), q[0]), nil, false)}
		}, p)
		if err != nil {
			return []*mx.Array{mx.Errorf("inner: %v", err)}
		}
		return []*mx.Array{mx.Sum(inner[0], nil, false)}
	}, []*mx.Array{x})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := g[0].Float32s()
	for i, want := range []float32{6, -12, 3} {
		if got[i] != want {
			t.Errorf("second derivative at %d: got %g, want %g", i, got[i], want)
		}
	}
}

// TestConcurrentCallers issues ops from many goroutines at once; the worker
// serializes them.
func TestConcurrentCallers(t *testing.T) {
	be := openOrSkip(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				v := float32(g*100 + i)
				a := mx.FromData(be, mx.Float32, []float32{v, 1}, 2)
				s, err := mx.Sum(mx.MulScalar(a, 2), nil, false).Item()
				if err != nil || s != 2*v+2 {
					errs <- fmt.Errorf("goroutine %d step %d: got %g, %v; want %g", g, i, s, err, 2*v+2)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
