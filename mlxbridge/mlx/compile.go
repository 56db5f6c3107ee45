//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Compiled functions (mx.Compiler). MLX's compile traces a function once for each
// set of input shapes and dtypes and afterwards replays the trace inside the
// library: a decoding step's block is one call from Go instead of one per op, and
// MLX skips each op's checks. On the CPU device the backend sets MLX's mode that
// keeps every traced op (no fusion: fusing would build C++ kernels at run time
// with the system's compiler, and round as the ops alone do not); on a GPU the
// trace's elementwise chains are fused into one kernel, as in mlx-lm.

var errNoCompile = errors.New("mlx: this libmlxc does not compile functions")

// compiled is one mlx_compile'd closure and the Go function it traces.
type compiled struct {
	be *Backend
	cl C.mlxc_closure
	t  *traced
}

// traced is the compiled closure's payload: f, called back (on the worker,
// inside mlx_closure_apply) whenever MLX traces it.
type traced struct {
	be     *Backend
	f      func([]*mx.Array) []*mx.Array
	err    error
	traces int
}

func (t *traced) fail(err error) { t.err = err }

func (t *traced) call(out *C.mlxc_vector, in C.mlxc_vector) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mlx: compiled: f panicked: %v", r)
		}
	}()
	t.traces++
	xs, err := t.be.adoptAll(in)
	if err != nil {
		return err
	}
	outs := t.f(xs)
	cs, err := outputArgs(outs, "compiled")
	if err != nil {
		return err
	}
	return setOutputs(out, cs, outs, "compiled")
}

// compiledRelease is what a compiled function's cleanup frees on the worker.
type compiledRelease struct {
	cl C.mlxc_closure
	h  cgo.Handle
}

// Compile traces f with mlx_compile (mx.Compile). The closure and f are
// released once the returned function is unreachable.
func (be *Backend) Compile(f func([]*mx.Array) []*mx.Array) (mx.CompiledFunc, error) {
	if !be.compiles {
		return nil, errNoCompile
	}
	return be.compile(f)
}

func (be *Backend) compile(f func([]*mx.Array) []*mx.Array) (*compiled, error) {
	t := &traced{be: be, f: f}
	h := cgo.NewHandle(t)
	c := &compiled{be: be, t: t}
	var err error
	be.w.do(func() {
		cl := C.mlxc_closure_for(C.uintptr_t(h))
		if cl.ctx == nil {
			err = lastError("compile: closure")
			return
		}
		defer C.mlxc_closure_free(cl)
		if C.mlxc_compile(&c.cl, cl, false) != 0 {
			err = lastError("compile")
		}
	})
	if err != nil {
		h.Delete()
		return nil, err
	}
	runtime.AddCleanup(c, be.releaseCompiled, compiledRelease{c.cl, h})
	return c, nil
}

// Call replays the trace for in (mx.CompiledFunc).
func (c *compiled) Call(in []*mx.Array) ([]*mx.Array, error) {
	var outs []*mx.Array
	var err error
	c.be.w.do(func() {
		c.be.drain()
		cs := make([]C.mlxc_array, len(in))
		for i, x := range in {
			if cs[i], err = arg(x); err != nil {
				return
			}
		}
		c.t.err = nil
		var v C.mlxc_vector
		rc := C.mlxc_apply(c.cl, ptr(cs), C.size_t(len(cs)), &v)
		if v.ctx != nil {
			defer C.mlxc_vector_array_free(v)
		}
		if rc != 0 {
			err = lastError("compiled")
			if c.t.err != nil {
				err = c.t.err
			}
			return
		}
		outs, err = c.be.adoptAll(v)
	})
	runtime.KeepAlive(c)
	return outs, err
}

// releaseCompiled runs on the runtime's cleanup goroutine: it only queues.
func (be *Backend) releaseCompiled(r compiledRelease) {
	be.mu.Lock()
	be.closures = append(be.closures, r)
	be.mu.Unlock()
	be.npend.Add(1)
}

// initCompile decides, on the worker at Open, whether the backend compiles: the
// library must have mlx_compile, and a function compiled and called twice with
// the same shapes must be traced once (MLX leaves functions uncompiled where its
// compile is disabled, and calling one back into Go on every call would only be
// slower). On the CPU device it turns fusion off.
func (be *Backend) initCompile() {
	if C.mlxc_has_compile() == 0 || C.mlxc_has_closure_apply() == 0 {
		return
	}
	if !be.gpu && (C.mlxc_has_set_compile_mode() == 0 || C.mlxc_set_compile_mode(C.MLXC_COMPILE_NO_FUSE) != 0) {
		C.mlxc_clear_error()
		return
	}
	c, err := be.compile(func(in []*mx.Array) []*mx.Array { return []*mx.Array{mx.Add(in[0], in[0])} })
	if err != nil {
		return
	}
	x := mx.FromData(be, mx.Float32, []float32{1})
	for range 2 {
		if _, err := c.Call([]*mx.Array{x}); err != nil {
			return
		}
	}
	be.compiles = c.t.traces == 1
}
