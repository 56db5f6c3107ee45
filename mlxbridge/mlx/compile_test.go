//go:build cgo && (darwin || linux)

package mlx

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
)

// swiglu is a pure function of its inputs of the kind decoding compiles: a
// residual add, a norm, two products, SiLU and a product.
func swiglu(in []*mx.Array) []*mx.Array {
	x, r, w, g, u := in[0], in[1], in[2], in[3], in[4]
	h := mx.Add(x, r)
	n := mx.RMSNorm(h, w, 1e-5)
	a, b := mx.MatmulT(n, g, false, true), mx.MatmulT(n, u, false, true)
	return []*mx.Array{mx.Add(h, mx.Mul(mx.Silu(a), b)), h}
}

func TestCompileReplays(t *testing.T) {
	be := openOrSkip(t)
	if !be.compiles {
		t.Skip("this libmlxc does not compile")
	}
	cf, err := be.compile(swiglu)
	if err != nil {
		t.Fatal(err)
	}
	args := func(seed uint64, rows int) []*mx.Array {
		return []*mx.Array{randn(be, seed, 1, rows, 64), randn(be, seed+1, 1, rows, 64), randn(be, seed+2, 64),
			randn(be, seed+3, 64, 64), randn(be, seed+4, 64, 64)}
	}
	for i, c := range []struct {
		seed   uint64
		rows   int
		traces int
	}{{1, 1, 1}, {10, 1, 1}, {20, 3, 2}, {30, 1, 2}, {40, 3, 2}} {
		in := args(c.seed, c.rows)
		got, err := cf.Call(in)
		if err != nil {
			t.Fatal(err)
		}
		want := swiglu(in)
		for j := range want {
			if !slices.Equal(got[j].Shape(), want[j].Shape()) || got[j].DType() != want[j].DType() {
				t.Fatalf("call %d output %d: %v %s, want %v %s", i, j, got[j].Shape(), got[j].DType(), want[j].Shape(), want[j].DType())
			}
			// The CPU device keeps every op (no fusion): the values are f's bit for bit.
			if d := maxAbsDiff(t, got[j], want[j]); d != 0 && !be.gpu {
				t.Errorf("call %d output %d differs from f's by %g", i, j, d)
			}
		}
		if cf.t.traces != c.traces {
			t.Errorf("after call %d (%d rows): %d traces, want %d", i, c.rows, cf.t.traces, c.traces)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	be := openOrSkip(t)
	if !be.compiles {
		t.Skip("this libmlxc does not compile")
	}
	calls := 0
	c := mx.Compile(be, 1, func(in []*mx.Array) []*mx.Array {
		calls++
		if in[0].Dim(0) == 3 {
			panic("three rows")
		}
		return []*mx.Array{mx.Exp(in[0])}
	})
	if !c.Compiles() {
		t.Fatal("Compile on a compiling backend: not compiled")
	}
	x := randn(be, 1, 2, 4)
	want := mx.Exp(x)
	replayed := func(what string) {
		t.Helper()
		before := calls
		if d := maxAbsDiff(t, c.Call(x)[0], want); d != 0 {
			t.Fatalf("%s: differs from f's by %g", what, d)
		}
		if calls != before {
			t.Fatalf("%s: f ran instead of the replay", what)
		}
	}
	if d := maxAbsDiff(t, c.Call(x)[0], want); d != 0 || calls != 1 {
		t.Fatalf("first call: differs by %g, f traced %d times", d, calls)
	}
	replayed("second call")
	// An input freed before the call: f runs and says what is wrong; the
	// compiled function is unharmed.
	y := randn(be, 2, 2, 4)
	be.Free(y)
	if err := c.Call(y)[0].Err(); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("freed input: %v", err)
	}
	replayed("after a freed input")
	// f panics while it is traced: the panic is kept on the worker, f runs
	// itself and panics where the caller sees it, and other shapes still replay.
	for range 2 {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "three rows") {
					t.Fatalf("panic in f: recovered %v", r)
				}
			}()
			c.Call(randn(be, 3, 3, 4))
		}()
	}
	replayed("after f panicked")

	// f reads a value back: that fails while it is traced and works when f runs
	// itself, so the result is f's and every later call runs f.
	reads := mx.Compile(be, 1, func(in []*mx.Array) []*mx.Array {
		calls++
		v, err := in[0].Float32s()
		if err != nil {
			return []*mx.Array{mx.ErrorArray(err)}
		}
		return []*mx.Array{mx.AddScalar(in[0], v[0])}
	})
	for i := range 2 {
		before := calls
		got := reads.Call(x)[0]
		v, _ := x.Float32s()
		if d := maxAbsDiff(t, got, mx.AddScalar(x, v[0])); d != 0 {
			t.Fatalf("call %d of a function that reads back: differs by %g (%v)", i, d, got.Err())
		}
		if reads.Compiles() {
			t.Fatalf("call %d: still compiling a function that reads back", i)
		}
		if want := 2 - i; calls-before != want {
			t.Fatalf("call %d: f ran %d times, want %d", i, calls-before, want)
		}
	}
	// The backend still works.
	if d := maxAbsDiff(t, mx.Add(x, x), mx.MulScalar(x, 2)); d != 0 {
		t.Fatalf("backend after the failed traces: %g", d)
	}
}

// TestCompiledReleased checks that a compiled function nobody holds is freed:
// its closure is queued by the cleanup and freed by the worker, and the handle
// that let MLX call back into Go is deleted.
func TestCompiledReleased(t *testing.T) {
	be := openOrSkip(t)
	if !be.compiles {
		t.Skip("this libmlxc does not compile")
	}
	func() {
		cf, err := be.compile(swiglu)
		if err != nil {
			t.Fatal(err)
		}
		in := []*mx.Array{randn(be, 1, 1, 1, 8), randn(be, 2, 1, 1, 8), randn(be, 3, 8), randn(be, 4, 8, 8), randn(be, 5, 8, 8)}
		if _, err := cf.Call(in); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		be.mu.Lock()
		n := len(be.closures)
		be.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unreachable compiled function was never queued for freeing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	be.Sweep()
	be.mu.Lock()
	n := len(be.closures)
	be.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d closures still queued after the worker drained", n)
	}
}

func maxAbsDiff(t *testing.T, a, b *mx.Array) float32 {
	t.Helper()
	av, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err := b.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if len(av) != len(bv) {
		t.Fatalf("sizes %d and %d", len(av), len(bv))
	}
	var d float32
	for i := range av {
		d = max(d, float32(math.Abs(float64(av[i]-bv[i]))))
	}
	return d
}

// TestCompiledUnderGrad differentiates through a compiled function with MLX's
// autodiff (its inputs are then MLX's tracers, which MLX's compile hands to f
// itself): the gradient is f's, and a later plain call still replays.
func TestCompiledUnderGrad(t *testing.T) {
	be := openOrSkip(t)
	if !be.compiles {
		t.Skip("this libmlxc does not compile")
	}
	in := []*mx.Array{randn(be, 1, 1, 1, 16), randn(be, 2, 1, 1, 16), randn(be, 3, 16), randn(be, 4, 16, 16), randn(be, 5, 16, 16)}
	c := mx.Compile(be, 2, swiglu)
	grad := func(g func([]*mx.Array) []*mx.Array) []*mx.Array {
		_, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			outs := g(append([]*mx.Array{p[0]}, in[1:]...))
			return []*mx.Array{mx.Sum(mx.Mul(outs[0], outs[1]), nil, false)}
		}, in[:1])
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	got, want := grad(func(x []*mx.Array) []*mx.Array { return c.Call(x...) }), grad(swiglu)
	if d := maxAbsDiff(t, got[0], want[0]); d != 0 && !be.gpu {
		t.Fatalf("gradient through the compiled function differs from f's by %g", d)
	}
	if !c.Compiles() {
		t.Fatal("differentiating through it turned compiling off")
	}
	if d := maxAbsDiff(t, c.Call(in...)[0], swiglu(in)[0]); d != 0 && !be.gpu {
		t.Fatalf("plain call after the gradient differs by %g", d)
	}
}
