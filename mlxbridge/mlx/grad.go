//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"

	mx "github.com/inloop/inloop/mlxbridge"
)

// gradCall is the state of one ValueAndGrad: the user's function, the params it
// was called for, and the Go error (or panic) the callback met, which is more
// useful than MLX's "closure returned a non-zero value".
type gradCall struct {
	be     *Backend
	f      func([]*mx.Array) []*mx.Array
	params []*mx.Array
	err    error
}

// closureCall is what an mlx_closure made by mlxc_closure_for runs: ValueAndGrad's
// function or a compiled one (compile.go), and where its error is kept.
type closureCall interface {
	call(out *C.mlxc_vector, in C.mlxc_vector) error
	fail(err error)
}

// goClosureCall is the mlx_closure MLX calls while it traces f. It runs on the
// worker thread, inside mlx_closure_value_and_grad_apply or mlx_closure_apply, so
// the backend calls f makes run directly there. The output vector arrives empty (a
// NULL ctx) and is filled with mlx_vector_array_set_data.
//
//export goClosureCall
func goClosureCall(out *C.mlxc_vector, in C.mlxc_vector, payload C.uintptr_t) C.int {
	g := cgo.Handle(payload).Value().(closureCall)
	if err := g.call(out, in); err != nil {
		g.fail(err)
		return 1
	}
	return 0
}

func (g *gradCall) fail(err error) { g.err = err }

func (g *gradCall) call(out *C.mlxc_vector, in C.mlxc_vector) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mlx: value and grad: f panicked: %v", r)
		}
	}()
	n := int(C.mlxc_vector_array_size(in))
	if n != len(g.params) {
		return fmt.Errorf("mlx: value and grad: traced %d inputs for %d params", n, len(g.params))
	}
	xs := make([]*mx.Array, n)
	for i, p := range g.params {
		var c C.mlxc_array
		if C.mlxc_vector_array_get(&c, in, C.size_t(i)) != 0 {
			return lastError("value and grad: input")
		}
		xs[i] = mx.Wrap(g.be, g.be.own(c), p.Shape(), p.DType())
	}
	outs := g.f(xs)
	cs, err := outputArgs(outs, "value and grad")
	if err != nil {
		return err
	}
	if loss := outs[0]; loss.Size() != 1 || !loss.DType().IsFloat() {
		return fmt.Errorf("mlx: value and grad: loss must be a float scalar, got %s", loss)
	}
	return setOutputs(out, cs, outs, "value and grad")
}

// outputArgs is the mlx_array of each of f's outputs, or the first output's error.
// It runs on the worker.
func outputArgs(outs []*mx.Array, what string) ([]C.mlxc_array, error) {
	if len(outs) == 0 {
		return nil, fmt.Errorf("mlx: %s: f returned no outputs", what)
	}
	cs := make([]C.mlxc_array, len(outs))
	for i, o := range outs {
		if err := o.Err(); err != nil {
			return nil, fmt.Errorf("mlx: %s: output %d: %w", what, i, err)
		}
		c, err := arg(o)
		if err != nil {
			return nil, fmt.Errorf("mlx: %s: output %d: %w", what, i, err)
		}
		cs[i] = c
	}
	return cs, nil
}

// setOutputs hands f's outputs (cs, of outs) back to MLX through the closure's
// output vector. It runs on the worker.
func setOutputs(out *C.mlxc_vector, cs []C.mlxc_array, outs []*mx.Array, what string) error {
	if C.mlxc_vector_array_set_data(out, ptr(cs), C.size_t(len(cs))) != 0 {
		return lastError(what + ": outputs")
	}
	runtime.KeepAlive(outs)
	return nil
}

// ValueAndGrad differentiates f with MLX's own autodiff (mlx_value_and_grad): f
// runs once, traced, and MLX builds the backward graph from its ops' rules.
func (be *Backend) ValueAndGrad(f func(params []*mx.Array) []*mx.Array, params []*mx.Array) (outs, grads []*mx.Array, err error) {
	g := &gradCall{be: be, f: f, params: params}
	h := cgo.NewHandle(g)
	defer h.Delete()
	be.w.wait(func() {
		be.drain()
		cs := make([]C.mlxc_array, len(params))
		argnums := make([]C.int, len(params))
		for i, p := range params {
			if cs[i], err = arg(p); err != nil {
				return
			}
			argnums[i] = C.int(i)
		}
		cl := C.mlxc_closure_for(C.uintptr_t(h))
		if cl.ctx == nil {
			err = lastError("value and grad: closure")
			return
		}
		defer C.mlxc_closure_free(cl)
		var vag C.mlxc_vag
		if C.mlxc_value_and_grad(&vag, cl, ptr(argnums), C.size_t(len(argnums))) != 0 {
			err = lastError("value and grad")
			return
		}
		defer C.mlxc_closure_value_and_grad_free(vag)
		in := C.mlxc_vector_array_new_data(ptr(cs), C.size_t(len(cs)))
		defer C.mlxc_vector_array_free(in)
		var vals, gs C.mlxc_vector
		rc := C.mlxc_closure_value_and_grad_apply(&vals, &gs, vag, in)
		if vals.ctx != nil {
			defer C.mlxc_vector_array_free(vals)
		}
		if gs.ctx != nil {
			defer C.mlxc_vector_array_free(gs)
		}
		if rc != 0 {
			err = lastError("value and grad")
			if g.err != nil {
				err = g.err
			}
			return
		}
		if outs, err = be.adoptAll(vals); err != nil {
			return
		}
		if grads, err = be.adoptAll(gs); err != nil {
			return
		}
		if len(grads) != len(params) {
			err = fmt.Errorf("mlx: value and grad: %d gradients for %d params", len(grads), len(params))
			return
		}
		for i, gr := range grads {
			if gr.DType() != params[i].DType() {
				grads[i] = mx.AsType(gr, params[i].DType())
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return outs, grads, nil
}

// adoptAll wraps every array of an MLX vector. It runs on the worker.
func (be *Backend) adoptAll(v C.mlxc_vector) ([]*mx.Array, error) {
	n := int(C.mlxc_vector_array_size(v))
	out := make([]*mx.Array, n)
	for i := range out {
		var c C.mlxc_array
		if C.mlxc_vector_array_get(&c, v, C.size_t(i)) != 0 {
			return nil, lastError("vector get")
		}
		a, err := be.adopt(c)
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}
