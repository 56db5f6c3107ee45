package mlxbridge

import (
	"fmt"
	"sync/atomic"
)

// Compiler is implemented by backends that trace a function of arrays once for
// each set of input shapes and dtypes and replay the trace afterwards (MLX's
// compile): a call is then one hand-over to the library instead of one per op.
type Compiler interface {
	Compile(f func(in []*Array) []*Array) (CompiledFunc, error)
}

// CompiledFunc is a Compiler's trace of f. Call replays it for in, tracing f
// again first for input shapes or dtypes it has not seen. An error leaves
// nothing half done: the caller may run f itself instead.
type CompiledFunc interface {
	Call(in []*Array) ([]*Array, error)
}

// Compiled is a function of arrays that its backend traces once for each set of
// input shapes and replays afterwards, where the backend can (Compiler); anywhere
// else each call runs f. f must be a pure function of its inputs: every array it
// reads comes in through in (an array it captured would be frozen into the
// trace), it reads no value back to the host, and it returns n arrays. Where the
// backend fuses a trace's elementwise ops (MLX on a GPU) results may differ from
// f's in the last bits; on MLX's CPU device they are f's exactly.
type Compiled struct {
	b  Backend
	n  int
	f  func(in []*Array) []*Array
	cf CompiledFunc // nil: f runs as it is
	// failed is set by a failed replay: f runs from then on.
	failed atomic.Bool
}

// Compile makes f, returning n arrays, a Compiled for backend b.
func Compile(b Backend, n int, f func(in []*Array) []*Array) *Compiled {
	c := &Compiled{b: b, n: n, f: f}
	if cc, ok := b.(Compiler); ok {
		if cf, err := cc.Compile(f); err == nil {
			c.cf = cf
		}
	}
	return c
}

// Compiles reports whether calls replay a trace rather than run f.
func (c *Compiled) Compiles() bool { return c.cf != nil && !c.failed.Load() }

// Call is f(in...). It runs f itself where the backend did not compile it, where
// an input is nil, carries an error, is traced by this package's autodiff or
// lives on another backend (f then says what is wrong, or records its gradient),
// and where the replay fails. A replay that fails where f succeeds (f read a
// value back while traced, say) turns compiling off for every later call.
func (c *Compiled) Call(in ...*Array) []*Array {
	if !c.Compiles() || len(in) == 0 || check("compiled", in...) != nil || in[0].b != c.b || traced(in...) {
		return c.f(in)
	}
	outs, err := c.cf.Call(in)
	keepAlive(in)
	if err == nil && len(outs) != c.n {
		err = fmt.Errorf("%d outputs, want %d", len(outs), c.n)
	}
	if err != nil {
		// f says what was wrong with the inputs; if it succeeds, the replay
		// failed for a reason of its own and f runs from now on.
		outs = c.f(in)
		if len(outs) > 0 && check("compiled", outs...) == nil {
			c.failed.Store(true)
		}
	}
	return outs
}
