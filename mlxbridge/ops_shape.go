package mlxbridge

// Reshape gives x a new shape with the same number of elements; one dimension may be -1.
func Reshape(x *Array, shape ...int) *Array {
	if e := check("reshape", x); e != nil {
		return e
	}
	shape = clone(shape)
	infer := -1
	n := 1
	for i, d := range shape {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			return Errorf("reshape: bad shape %s", fmtShape(shape))
		default:
			n *= d
		}
	}
	total := x.Size()
	if infer >= 0 {
		if n == 0 || total%n != 0 {
			return Errorf("reshape: cannot reshape %s to %s", fmtShape(x.shape), fmtShape(shape))
		}
		shape[infer] = total / n
	} else if n != total {
		return Errorf("reshape: cannot reshape %s to %s", fmtShape(x.shape), fmtShape(shape))
	}
	if sameShape(shape, x.shape) {
		return x
	}
	h, err := x.b.Reshape(x, shape)
	keepAlive(x)
	out := newArray("reshape", x.b, h, err, shape, x.dtype)
	return record(out, func(g *Array) []*Array { return []*Array{Reshape(g, x.shape...)} }, x)
}

// ExpandDims inserts a size-1 axis at axis.
func ExpandDims(x *Array, axis int) *Array {
	if e := check("expand_dims", x); e != nil {
		return e
	}
	ax, err := normAxis(axis, len(x.shape)+1)
	if err != nil {
		return Errorf("expand_dims: %v", err)
	}
	s := append(clone(x.shape[:ax]), 1)
	return Reshape(x, append(s, x.shape[ax:]...)...)
}

// Squeeze removes a size-1 axis.
func Squeeze(x *Array, axis int) *Array {
	if e := check("squeeze", x); e != nil {
		return e
	}
	ax, err := normAxis(axis, len(x.shape))
	if err != nil || x.shape[ax] != 1 {
		return Errorf("squeeze: axis %d of %s", axis, fmtShape(x.shape))
	}
	return Reshape(x, append(clone(x.shape[:ax]), x.shape[ax+1:]...)...)
}

// Transpose permutes axes; no perm reverses them.
func Transpose(x *Array, perm ...int) *Array {
	if e := check("transpose", x); e != nil {
		return e
	}
	nd := len(x.shape)
	if len(perm) == 0 {
		perm = make([]int, nd)
		for i := range perm {
			perm[i] = nd - 1 - i
		}
	}
	if len(perm) != nd {
		return Errorf("transpose: perm %v for %d dimensions", perm, nd)
	}
	p := make([]int, nd)
	seen := make([]bool, nd)
	identity := true
	for i, a := range perm {
		n, err := normAxis(a, nd)
		if err != nil || seen[n] {
			return Errorf("transpose: bad perm %v", perm)
		}
		seen[n] = true
		p[i] = n
		identity = identity && n == i
	}
	if identity {
		return x
	}
	shape := make([]int, nd)
	inv := make([]int, nd)
	for i, a := range p {
		shape[i] = x.shape[a]
		inv[a] = i
	}
	h, err := x.b.Transpose(x, p)
	keepAlive(x)
	out := newArray("transpose", x.b, h, err, shape, x.dtype)
	return record(out, func(g *Array) []*Array { return []*Array{Transpose(g, inv...)} }, x)
}

// SwapAxes exchanges two axes.
func SwapAxes(x *Array, a, b int) *Array {
	if e := check("swapaxes", x); e != nil {
		return e
	}
	nd := len(x.shape)
	a1, err1 := normAxis(a, nd)
	b1, err2 := normAxis(b, nd)
	if err1 != nil || err2 != nil {
		return Errorf("swapaxes: axes %d, %d of %d dimensions", a, b, nd)
	}
	perm := make([]int, nd)
	for i := range perm {
		perm[i] = i
	}
	perm[a1], perm[b1] = b1, a1
	return Transpose(x, perm...)
}

// Broadcast expands x to shape by NumPy's rules.
func Broadcast(x *Array, shape []int) *Array {
	if e := check("broadcast", x); e != nil {
		return e
	}
	s, err := broadcastShapes(x.shape, shape)
	if err != nil || !sameShape(s, shape) {
		return Errorf("broadcast: cannot broadcast %s to %s", fmtShape(x.shape), fmtShape(shape))
	}
	if sameShape(x.shape, shape) {
		return x
	}
	h, err := x.b.Broadcast(x, clone(shape))
	keepAlive(x)
	out := newArray("broadcast", x.b, h, err, clone(shape), x.dtype)
	return record(out, func(g *Array) []*Array { return []*Array{unbroadcast(g, x.shape)} }, x)
}

// Slice takes x[start:stop] on every axis (negative indices count from the end;
// a stop beyond the axis is clipped). SliceStep adds strides, which must be positive.
func Slice(x *Array, start, stop []int) *Array { return SliceStep(x, start, stop, nil) }

func SliceStep(x *Array, start, stop, step []int) *Array {
	if e := check("slice", x); e != nil {
		return e
	}
	nd := len(x.shape)
	if len(start) != nd || len(stop) != nd || (step != nil && len(step) != nd) {
		return Errorf("slice: %d dimensions, got start %v stop %v", nd, start, stop)
	}
	st, out := make([]int, nd), make([]int, nd)
	sp := make([]int, nd)
	for i, d := range x.shape {
		s, e, k := start[i], stop[i], 1
		if step != nil {
			k = step[i]
		}
		if k <= 0 {
			return Errorf("slice: step %d must be positive", k)
		}
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		s, e = min(max(s, 0), d), min(max(e, 0), d)
		st[i], sp[i] = s, k
		if e > s {
			out[i] = (e - s + k - 1) / k
		}
	}
	h, err := x.b.Slice(x, st, sp, out)
	keepAlive(x)
	res := newArray("slice", x.b, h, err, out, x.dtype)
	return record(res, func(g *Array) []*Array {
		return []*Array{SliceUpdate(ZerosLike(x), g, st, sp)}
	}, x)
}

// SliceAxis takes x[..., start:stop, ...] along one axis.
func SliceAxis(x *Array, axis, start, stop int) *Array {
	if e := check("slice", x); e != nil {
		return e
	}
	ax, err := normAxis(axis, len(x.shape))
	if err != nil {
		return Errorf("slice: %v", err)
	}
	s, e := make([]int, len(x.shape)), clone(x.shape)
	s[ax], e[ax] = start, stop
	return Slice(x, s, e)
}

// SliceUpdate returns dst with the window at start (stride step, nil for 1) replaced by src.
func SliceUpdate(dst, src *Array, start, step []int) *Array {
	if e := check("slice_update", dst, src); e != nil {
		return e
	}
	nd := len(dst.shape)
	if len(src.shape) != nd || len(start) != nd || (step != nil && len(step) != nd) {
		return Errorf("slice_update: dst %s, src %s, start %v", fmtShape(dst.shape), fmtShape(src.shape), start)
	}
	if step == nil {
		step = make([]int, nd)
		for i := range step {
			step[i] = 1
		}
	}
	for i := range dst.shape {
		if start[i] < 0 || step[i] <= 0 || (src.shape[i] > 0 && start[i]+(src.shape[i]-1)*step[i] >= dst.shape[i]) {
			return Errorf("slice_update: window of %s at %v step %v outside %s", fmtShape(src.shape), start, step, fmtShape(dst.shape))
		}
	}
	if dst.dtype != src.dtype {
		src = AsType(src, dst.dtype)
	}
	h, err := dst.b.SliceUpdate(dst, src, clone(start), clone(step))
	keepAlive(dst, src)
	out := newArray("slice_update", dst.b, h, err, dst.shape, dst.dtype)
	return record(out, func(g *Array) []*Array {
		stop := make([]int, nd)
		for i := range stop {
			stop[i] = start[i] + (src.shape[i]-1)*step[i] + 1
		}
		return []*Array{
			SliceUpdate(g, ZerosLike(src), start, step),
			SliceStep(g, start, stop, step),
		}
	}, dst, src)
}

// Concatenate joins arrays along axis.
func Concatenate(xs []*Array, axis int) *Array {
	if len(xs) == 0 {
		return Errorf("concatenate: no arrays")
	}
	if e := check("concatenate", xs...); e != nil {
		return e
	}
	nd := len(xs[0].shape)
	ax, err := normAxis(axis, nd)
	if err != nil {
		return Errorf("concatenate: %v", err)
	}
	out := clone(xs[0].shape)
	out[ax] = 0
	for _, x := range xs {
		if len(x.shape) != nd || x.dtype != xs[0].dtype {
			return Errorf("concatenate: %s %s with %s %s", fmtShape(xs[0].shape), xs[0].dtype, fmtShape(x.shape), x.dtype)
		}
		for i := range x.shape {
			if i != ax && x.shape[i] != xs[0].shape[i] {
				return Errorf("concatenate: shapes %s and %s differ off axis %d", fmtShape(xs[0].shape), fmtShape(x.shape), ax)
			}
		}
		out[ax] += x.shape[ax]
	}
	if len(xs) == 1 {
		return xs[0]
	}
	h, err := xs[0].b.Concatenate(xs, ax, out)
	keepAlive(xs)
	res := newArray("concatenate", xs[0].b, h, err, out, xs[0].dtype)
	return record(res, func(g *Array) []*Array {
		gs := make([]*Array, len(xs))
		off := 0
		for i, x := range xs {
			gs[i] = SliceAxis(g, ax, off, off+x.shape[ax])
			off += x.shape[ax]
		}
		return gs
	}, xs...)
}

// Take gathers x's slices at integer indices along axis (an embedding lookup is Take(w, ids, 0)).
// Out-of-range indices are an error reported by the backend.
func Take(x, idx *Array, axis int) *Array {
	if e := check("take", x, idx); e != nil {
		return e
	}
	if idx.dtype != Int32 && idx.dtype != Uint32 {
		return Errorf("take: indices must be int32 or uint32, got %s", idx.dtype)
	}
	ax, err := normAxis(axis, len(x.shape))
	if err != nil {
		return Errorf("take: %v", err)
	}
	shape := append(append(clone(x.shape[:ax]), idx.shape...), x.shape[ax+1:]...)
	h, err := x.b.Take(x, idx, ax)
	keepAlive(x, idx)
	out := newArray("take", x.b, h, err, shape, x.dtype)
	if !x.dtype.IsFloat() {
		return out
	}
	return record(out, func(g *Array) []*Array {
		h, err := g.b.ScatterAdd(g, idx, ax, x.shape)
		keepAlive(g, idx)
		return []*Array{newArray("take grad", g.b, h, err, clone(x.shape), g.dtype), nil}
	}, x, idx)
}

// TakeAlongAxis picks x's elements at idx along axis; idx has x's rank and its other
// axes broadcast against x's.
func TakeAlongAxis(x, idx *Array, axis int) *Array {
	if e := check("take_along_axis", x, idx); e != nil {
		return e
	}
	if idx.dtype != Int32 && idx.dtype != Uint32 {
		return Errorf("take_along_axis: indices must be int32 or uint32, got %s", idx.dtype)
	}
	if len(idx.shape) != len(x.shape) {
		return Errorf("take_along_axis: indices %s for array %s", fmtShape(idx.shape), fmtShape(x.shape))
	}
	ax, err := normAxis(axis, len(x.shape))
	if err != nil {
		return Errorf("take_along_axis: %v", err)
	}
	xs, is := clone(x.shape), clone(idx.shape)
	xs[ax], is[ax] = 1, 1
	out, err := broadcastShapes(xs, is)
	if err != nil {
		return Errorf("take_along_axis: %v", err)
	}
	out[ax] = idx.shape[ax]
	h, err := x.b.TakeAlongAxis(x, idx, ax, out)
	keepAlive(x, idx)
	res := newArray("take_along_axis", x.b, h, err, out, x.dtype)
	if !x.dtype.IsFloat() {
		return res
	}
	return record(res, func(g *Array) []*Array {
		full := clone(out)
		full[ax] = x.shape[ax]
		h, err := g.b.ScatterAddAlongAxis(g, idx, ax, full)
		keepAlive(g, idx)
		gx := newArray("take_along_axis grad", g.b, h, err, full, g.dtype)
		return []*Array{unbroadcast(gx, x.shape), nil}
	}, x, idx)
}

// Stack joins arrays along a new axis.
func Stack(xs []*Array, axis int) *Array {
	ys := make([]*Array, len(xs))
	for i, x := range xs {
		ys[i] = ExpandDims(x, axis)
	}
	return Concatenate(ys, axis)
}
