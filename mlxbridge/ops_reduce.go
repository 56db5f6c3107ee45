package mlxbridge

import "slices"

// reduce reduces axes (nil: all) and drops them unless keep.
func reduce(name string, op ReduceOp, x *Array, axes []int, keep bool) *Array {
	if e := checkFloat(name, x); e != nil {
		return e
	}
	ax, err := normAxes(axes, len(x.shape))
	if err != nil {
		return Errorf("%s: %v", name, err)
	}
	ks := keepShape(x.shape, ax)
	all := ax
	// Reducing an axis of one value is the identity: only the shape changes.
	ax = slices.DeleteFunc(slices.Clone(ax), func(a int) bool { return x.shape[a] == 1 })
	var out *Array
	if len(ax) == 0 {
		out = x
	} else {
		h, err := x.b.Reduce(op, x, ax)
		keepAlive(x)
		out = newArray(name, x.b, h, err, ks, x.dtype)
		out = record(out, func(g *Array) []*Array {
			g = Broadcast(g, x.shape)
			if op == ReduceSum {
				return []*Array{g}
			}
			// Max/min: the gradient goes to the arg-extremes, split evenly between ties.
			y := Broadcast(StopGradient(out), x.shape)
			mask := AsType(Equal(StopGradient(x), y), x.dtype)
			count := Broadcast(Sum(mask, ax, true), x.shape)
			return []*Array{Div(Mul(g, mask), count)}
		}, x)
	}
	if keep {
		return out
	}
	return Reshape(out, dropShape(x.shape, all)...)
}

// Sum, Mean, Max and Min reduce over axes (nil for all axes).
func Sum(x *Array, axes []int, keep bool) *Array { return reduce("sum", ReduceSum, x, axes, keep) }
func Max(x *Array, axes []int, keep bool) *Array { return reduce("max", ReduceMax, x, axes, keep) }
func Min(x *Array, axes []int, keep bool) *Array { return reduce("min", ReduceMin, x, axes, keep) }

func Mean(x *Array, axes []int, keep bool) *Array {
	if e := checkFloat("mean", x); e != nil {
		return e
	}
	ax, err := normAxes(axes, len(x.shape))
	if err != nil {
		return Errorf("mean: %v", err)
	}
	n := 1
	for _, a := range ax {
		n *= x.shape[a]
	}
	return MulScalar(Sum(x, ax, keep), 1/float32(n))
}

// ArgMax returns Int32 indices of the maximum along axis.
func ArgMax(x *Array, axis int, keep bool) *Array {
	if e := checkFloat("argmax", x); e != nil {
		return e
	}
	ax, err := normAxis(axis, len(x.shape))
	if err != nil {
		return Errorf("argmax: %v", err)
	}
	if x.shape[ax] == 0 {
		return Errorf("argmax: empty axis %d", axis)
	}
	h, err := x.b.ArgMax(x, ax)
	keepAlive(x)
	out := newArray("argmax", x.b, h, err, keepShape(x.shape, []int{ax}), Int32)
	if keep {
		return out
	}
	return Reshape(out, dropShape(x.shape, []int{ax})...)
}

// lastAxisOp moves axis to the end, applies f, and moves it back.
func lastAxisOp(x *Array, axis int, f func(*Array) *Array) *Array {
	ax, err := normAxis(axis, len(x.shape))
	if err != nil {
		return Errorf("%v", err)
	}
	last := len(x.shape) - 1
	if ax == last {
		return f(x)
	}
	perm := make([]int, len(x.shape))
	for i := range perm {
		perm[i] = i
	}
	perm[ax], perm[last] = last, ax
	return Transpose(f(Transpose(x, perm...)), perm...)
}

// Softmax along axis.
func Softmax(x *Array, axis int) *Array {
	if e := checkFloat("softmax", x); e != nil {
		return e
	}
	if len(x.shape) == 0 {
		return Errorf("softmax: scalar input")
	}
	return lastAxisOp(x, axis, softmaxLast)
}

func softmaxLast(x *Array) *Array {
	var out *Array
	if s, ok := x.b.(Softmaxer); ok {
		h, err := s.Softmax(x)
		keepAlive(x)
		out = newArray("softmax", x.b, h, err, x.shape, x.dtype)
	} else {
		sx := StopGradient(x)
		e := Exp(Sub(sx, StopGradient(Max(sx, []int{-1}, true))))
		out = Div(e, Sum(e, []int{-1}, true))
	}
	return record(out, func(g *Array) []*Array {
		y := StopGradient(out)
		return []*Array{Mul(y, Sub(g, Sum(Mul(g, y), []int{-1}, true)))}
	}, x)
}

// LogSumExp reduces axes stably: log(sum(exp(x))).
func LogSumExp(x *Array, axes []int, keep bool) *Array {
	if e := checkFloat("logsumexp", x); e != nil {
		return e
	}
	ax, err := normAxes(axes, len(x.shape))
	if err != nil {
		return Errorf("logsumexp: %v", err)
	}
	if len(ax) == 1 && ax[0] == len(x.shape)-1 {
		out := logSumExpLast(x)
		if keep {
			return out
		}
		return Reshape(out, dropShape(x.shape, ax)...)
	}
	m := StopGradient(Max(x, ax, true))
	out := Add(Log(Sum(Exp(Sub(x, m)), ax, true)), m)
	if keep {
		return out
	}
	return Reshape(out, dropShape(x.shape, ax)...)
}

func logSumExpLast(x *Array) *Array {
	var out *Array
	if l, ok := x.b.(LogSumExper); ok {
		h, err := l.LogSumExp(x)
		keepAlive(x)
		out = newArray("logsumexp", x.b, h, err, keepShape(x.shape, []int{len(x.shape) - 1}), x.dtype)
	} else {
		sx := StopGradient(x)
		m := StopGradient(Max(sx, []int{-1}, true))
		out = Add(Log(Sum(Exp(Sub(sx, m)), []int{-1}, true)), m)
	}
	return record(out, func(g *Array) []*Array {
		return []*Array{Mul(g, Exp(Sub(StopGradient(x), StopGradient(out))))}
	}, x)
}

// LogSoftmax along the last axis.
func LogSoftmax(x *Array) *Array { return Sub(x, LogSumExp(x, []int{-1}, true)) }

// Sort sorts x along axis in ascending order; NaNs, if any, come last. Not
// differentiable (a traced input gives an error). Backends implement Sorter.
func Sort(x *Array, axis int) *Array {
	if e := checkFloat("sort", x); e != nil {
		return e
	}
	if len(x.shape) == 0 {
		return Errorf("sort: scalar input")
	}
	if traced(x) {
		return Errorf("sort: not differentiable")
	}
	s, ok := x.b.(Sorter)
	if !ok {
		return Errorf("sort: the %s backend cannot sort", x.b.Name())
	}
	return lastAxisOp(x, axis, func(x *Array) *Array {
		h, err := s.Sort(x)
		keepAlive(x)
		return newArray("sort", x.b, h, err, x.shape, x.dtype)
	})
}

// CumSum is the inclusive running sum along axis: out[i] = x[0] + … + x[i],
// or with reverse x[i] + … + x[n−1]. Backends implement CumSummer.
func CumSum(x *Array, axis int, reverse bool) *Array {
	if e := checkFloat("cumsum", x); e != nil {
		return e
	}
	if len(x.shape) == 0 {
		return Errorf("cumsum: scalar input")
	}
	c, ok := x.b.(CumSummer)
	if !ok {
		return Errorf("cumsum: the %s backend has no running sum", x.b.Name())
	}
	return lastAxisOp(x, axis, func(x *Array) *Array {
		h, err := c.CumSum(x, reverse)
		keepAlive(x)
		out := newArray("cumsum", x.b, h, err, x.shape, x.dtype)
		// Each x[j] adds to every out[i] from j on (to j, reversed).
		return record(out, func(g *Array) []*Array { return []*Array{CumSum(g, -1, !reverse)} }, x)
	})
}
