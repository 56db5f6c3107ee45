package mlxbridge

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// node records how an array was made, for the reverse pass. Only arrays that depend
// on a parameter being differentiated get one, so inference builds no graph.
type node struct {
	inputs []*Array
	// vjp maps the output's cotangent to one cotangent per input (nil where the
	// input gets no gradient). It is written with this package's ops.
	vjp  func(g *Array) []*Array
	leaf int // index into params for a leaf, else -1
	// seq numbers nodes in the order they were made, so a checkpoint tells
	// the nodes its function made from those it was given.
	seq uint64
}

var nodeSeq atomic.Uint64

func newNode(inputs []*Array, vjp func(g *Array) []*Array, leaf int) *node {
	return &node{inputs: inputs, vjp: vjp, leaf: leaf, seq: nodeSeq.Add(1)}
}

// traced reports whether any input is part of a graph being differentiated.
func traced(xs ...*Array) bool {
	for _, x := range xs {
		if x != nil && x.node != nil {
			return true
		}
	}
	return false
}

// record attaches a vjp to out when any input is traced.
func record(out *Array, vjp func(g *Array) []*Array, inputs ...*Array) *Array {
	if out.err == nil && traced(inputs...) {
		out.node = newNode(inputs, vjp, -1)
	}
	return out
}

// StopGradient returns x cut out of the graph: no gradient flows through it.
func StopGradient(x *Array) *Array {
	if x == nil || x.err != nil {
		return x
	}
	if sg, ok := x.b.(StopGradienter); ok {
		h, err := sg.StopGradient(x)
		keepAlive(x)
		return newArray("stop_gradient", x.b, h, err, x.shape, x.dtype)
	}
	if x.node == nil {
		return x
	}
	return &Array{b: x.b, h: x.h, shape: x.shape, dtype: x.dtype}
}

// ValueAndGrad calls f on params and returns f's outputs and the gradient of the
// first output, a scalar, with respect to each param. Further outputs ride along
// as auxiliary values (token counts, accuracies). A param the loss does not depend
// on gets a zero gradient. Backends with their own autodiff (Grader) do the work.
func ValueAndGrad(f func(params []*Array) []*Array, params []*Array) (outs, grads []*Array, err error) {
	if len(params) == 0 {
		return nil, nil, errors.New("mlxbridge: value and grad: no params")
	}
	for i, p := range params {
		if err := p.Err(); err != nil {
			return nil, nil, fmt.Errorf("mlxbridge: value and grad: param %d: %w", i, err)
		}
		if !p.dtype.IsFloat() {
			return nil, nil, fmt.Errorf("mlxbridge: value and grad: param %d is %s, not float", i, p.dtype)
		}
	}
	if g, ok := params[0].b.(Grader); ok {
		return g.ValueAndGrad(f, params)
	}
	leaves := make([]*Array, len(params))
	for i, p := range params {
		leaves[i] = &Array{b: p.b, h: p.h, shape: p.shape, dtype: p.dtype, node: newNode(nil, nil, i)}
	}
	outs = safeCall(f, leaves)
	if len(outs) == 0 {
		return nil, nil, errors.New("mlxbridge: value and grad: f returned no outputs")
	}
	for i, o := range outs {
		if err := o.Err(); err != nil {
			return nil, nil, fmt.Errorf("mlxbridge: value and grad: output %d: %w", i, err)
		}
	}
	loss := outs[0]
	if loss.Size() != 1 || !loss.dtype.IsFloat() {
		return nil, nil, fmt.Errorf("mlxbridge: value and grad: loss must be a float scalar, got %s", loss)
	}
	grads, err = backward(loss, params)
	for i, o := range outs { // hand back plain values, not graph nodes
		outs[i] = StopGradient(o)
	}
	return outs, grads, err
}

// safeCall turns a panic inside the user's function into an error output, so a bug
// in model code surfaces as an error from ValueAndGrad rather than a crash.
func safeCall(f func([]*Array) []*Array, xs []*Array) (outs []*Array) {
	defer func() {
		if r := recover(); r != nil {
			outs = []*Array{Errorf("value and grad: f panicked: %v", r)}
		}
	}()
	return f(xs)
}

// backward runs the reverse pass from a scalar loss.
func backward(loss *Array, params []*Array) ([]*Array, error) {
	grads := make([]*Array, len(params))
	if loss.node != nil {
		cots := propagate(loss.node, Full(loss.b, loss.shape, 1, loss.dtype), func(n *node) bool { return n.leaf < 0 })
		for n, g := range cots {
			if n.leaf >= 0 {
				grads[n.leaf] = g
			}
		}
	}
	for i, p := range params {
		if grads[i] == nil {
			grads[i] = ZerosLike(p)
		}
		if grads[i].dtype != p.dtype {
			grads[i] = AsType(grads[i], p.dtype)
		}
		// Cotangents computed from traced values carry graph nodes; drop them so the
		// caller holding gradients does not keep every activation alive.
		grads[i] = StopGradient(grads[i])
		if err := grads[i].Err(); err != nil {
			return nil, fmt.Errorf("mlxbridge: value and grad: gradient %d: %w", i, err)
		}
	}
	return grads, nil
}

// propagate runs the reverse pass from root, whose cotangent is g, through
// every node reachable from it for which inside is true, in reverse
// topological order, and returns the summed cotangents that reached the
// nodes where it stopped (those inside reports false for: the leaves of a
// whole pass, the nodes made before a checkpoint's function ran).
func propagate(root *node, g *Array, inside func(*node) bool) map[*node]*Array {
	if !inside(root) {
		return map[*node]*Array{root: g}
	}
	// Topological order by depth-first search over traced inputs.
	var order []*node
	seen := map[*node]bool{root: true}
	type frame struct {
		n *node
		i int
	}
	stack := []frame{{root, 0}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.i < len(top.n.inputs) {
			in := top.n.inputs[top.i]
			top.i++
			if in != nil && in.node != nil && !seen[in.node] {
				seen[in.node] = true
				if inside(in.node) {
					stack = append(stack, frame{in.node, 0})
				}
			}
			continue
		}
		order = append(order, top.n)
		stack = stack[:len(stack)-1]
	}
	cot := map[*node]*Array{root: g}
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		g := cot[n]
		delete(cot, n) // free as we go
		if g == nil {
			continue
		}
		gs := n.vjp(g)
		for j, in := range n.inputs {
			if in == nil || in.node == nil || j >= len(gs) || gs[j] == nil {
				continue
			}
			gj := gs[j]
			if !sameShape(gj.shape, in.shape) && gj.err == nil {
				gj = Errorf("value and grad: internal: cotangent %s for input %s", fmtShape(gj.shape), fmtShape(in.shape))
			}
			if prev := cot[in.node]; prev != nil {
				gj = Add(prev, gj)
			}
			cot[in.node] = gj
		}
	}
	return cot
}

// unbroadcast sums g down to shape, undoing NumPy broadcasting.
func unbroadcast(g *Array, shape []int) *Array {
	if g.err != nil || sameShape(g.shape, shape) {
		return g
	}
	lead := len(g.shape) - len(shape)
	var axes []int
	for i := range g.shape {
		if i < lead || (shape[i-lead] == 1 && g.shape[i] != 1) {
			axes = append(axes, i)
		}
	}
	if len(axes) > 0 {
		g = Sum(g, axes, true)
	}
	return Reshape(g, shape...)
}
