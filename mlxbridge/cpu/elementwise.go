package cpu

import (
	"fmt"
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

const elemGrain = 1 << 13

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

const sqrt2overPi = 0.7978845608028654

func unaryFunc(op mx.UnaryOp) func(float32) float32 {
	switch op {
	case mx.OpNeg:
		return func(x float32) float32 { return -x }
	case mx.OpExp:
		return func(x float32) float32 { return float32(math.Exp(float64(x))) }
	case mx.OpLog:
		return func(x float32) float32 { return float32(math.Log(float64(x))) }
	case mx.OpSqrt:
		return func(x float32) float32 { return float32(math.Sqrt(float64(x))) }
	case mx.OpRsqrt:
		return func(x float32) float32 { return float32(1 / math.Sqrt(float64(x))) }
	case mx.OpSilu:
		return func(x float32) float32 { return x * sigmoid(x) }
	case mx.OpSiluGrad:
		return func(x float32) float32 { s := sigmoid(x); return s * (1 + x*(1-s)) }
	case mx.OpGelu:
		return func(x float32) float32 { return float32(0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2))) }
	case mx.OpGeluGrad:
		return func(x float32) float32 {
			v := float64(x)
			return float32(0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi))
		}
	case mx.OpGeluApprox:
		return func(x float32) float32 {
			v := float64(x)
			return float32(0.5 * v * (1 + math.Tanh(sqrt2overPi*(v+0.044715*v*v*v))))
		}
	case mx.OpGeluApproxGrad:
		return func(x float32) float32 {
			v := float64(x)
			t := math.Tanh(sqrt2overPi * (v + 0.044715*v*v*v))
			return float32(0.5*(1+t) + 0.5*v*(1-t*t)*sqrt2overPi*(1+3*0.044715*v*v))
		}
	case mx.OpSigmoid:
		return sigmoid
	case mx.OpTanh:
		return func(x float32) float32 { return float32(math.Tanh(float64(x))) }
	case mx.OpAbs:
		return func(x float32) float32 { return float32(math.Abs(float64(x))) }
	case mx.OpSquare:
		return func(x float32) float32 { return x * x }
	case mx.OpSign:
		return func(x float32) float32 {
			switch {
			case x > 0:
				return 1
			case x < 0:
				return -1
			}
			return x // keeps 0, -0 and NaN
		}
	}
	return nil
}

func (be *Backend) Unary(op mx.UnaryOp, x *mx.Array) (mx.Handle, error) {
	var vec func(y, x []float32) // the C kernels of vecmath.c
	switch op {
	case mx.OpExp:
		vec = expVec
	case mx.OpSilu:
		vec = siluVec
	case mx.OpSiluGrad:
		vec = siluGradVec
	case mx.OpSigmoid:
		vec = sigmoidVec
	}
	if vec != nil {
		src := h(x).f
		out := newF(len(src))
		vec(out, src)
		roundTo(x.DType(), out)
		return fbuf(out), nil
	}
	f := unaryFunc(op)
	if f == nil {
		return nil, fmt.Errorf("cpu: unary op %d not supported", op)
	}
	src := h(x).f
	out := newF(len(src))
	parallel(len(src), elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = f(src[i])
		}
	})
	roundTo(x.DType(), out)
	return fbuf(out), nil
}

// cBinary numbers the ops inloop_binary (vecmath.c) runs; cBinaryMin is the length from
// which its vector loop repays the call into C.
func cBinary(op mx.BinaryOp) (int, bool) {
	switch op {
	case mx.OpAdd:
		return 0, true
	case mx.OpSub:
		return 1, true
	case mx.OpMul:
		return 2, true
	case mx.OpDiv:
		return 3, true
	}
	return 0, false
}

const cBinaryMin = 64

// binaryKernel applies op to n elements: out[i] = a[i*as] op b[i*bs], with as, bs in {0, 1}.
func binaryKernel(op mx.BinaryOp, out, a []float32, as int, b []float32, bs int) {
	n := len(out)
	if c, ok := cBinary(op); ok && n >= cBinaryMin && as|bs == 1 {
		binaryVec(c, out, a, as, b, bs)
		return
	}
	switch {
	case op == mx.OpAdd && as == 1 && bs == 1:
		for i := range out {
			out[i] = a[i] + b[i]
		}
	case op == mx.OpAdd && as == 1 && bs == 0:
		v := b[0]
		for i := range out {
			out[i] = a[i] + v
		}
	case op == mx.OpMul && as == 1 && bs == 1:
		for i := range out {
			out[i] = a[i] * b[i]
		}
	case op == mx.OpMul && as == 1 && bs == 0:
		v := b[0]
		for i := range out {
			out[i] = a[i] * v
		}
	case op == mx.OpMul && as == 0 && bs == 1:
		v := a[0]
		for i := range out {
			out[i] = v * b[i]
		}
	case op == mx.OpSub && as == 1 && bs == 1:
		for i := range out {
			out[i] = a[i] - b[i]
		}
	case op == mx.OpDiv && as == 1 && bs == 1:
		for i := range out {
			out[i] = a[i] / b[i]
		}
	default:
		f := binaryFunc(op)
		for i, ia, ib := 0, 0, 0; i < n; i, ia, ib = i+1, ia+as, ib+bs {
			out[i] = f(a[ia], b[ib])
		}
	}
}

func binaryFunc(op mx.BinaryOp) func(a, b float32) float32 {
	switch op {
	case mx.OpAdd:
		return func(a, b float32) float32 { return a + b }
	case mx.OpSub:
		return func(a, b float32) float32 { return a - b }
	case mx.OpMul:
		return func(a, b float32) float32 { return a * b }
	case mx.OpDiv:
		return func(a, b float32) float32 { return a / b }
	case mx.OpMaximum:
		return func(a, b float32) float32 {
			if a != a || a >= b {
				return a // NaN propagates, as in MLX
			}
			return b
		}
	case mx.OpMinimum:
		return func(a, b float32) float32 {
			if a != a || a <= b {
				return a
			}
			return b
		}
	case mx.OpPower:
		return func(a, b float32) float32 { return float32(math.Pow(float64(a), float64(b))) }
	case mx.OpGreater:
		return func(a, b float32) float32 { return b2f(a > b) }
	case mx.OpGreaterEqual:
		return func(a, b float32) float32 { return b2f(a >= b) }
	case mx.OpLess:
		return func(a, b float32) float32 { return b2f(a < b) }
	case mx.OpEqual:
		return func(a, b float32) float32 { return b2f(a == b) }
	}
	return nil
}

func b2f(v bool) float32 {
	if v {
		return 1
	}
	return 0
}

// asFloat views any array's values as float32 (a copy for non-float dtypes).
func asFloat(x *mx.Array) []float32 {
	b := h(x)
	switch x.DType() {
	case mx.Int32:
		f := make([]float32, len(b.i))
		for i, v := range b.i {
			f[i] = float32(v)
		}
		return f
	case mx.Uint32:
		f := make([]float32, len(b.u))
		for i, v := range b.u {
			f[i] = float32(v)
		}
		return f
	case mx.Uint8, mx.Bool:
		f := make([]float32, len(b.b))
		for i, v := range b.b {
			f[i] = float32(v)
		}
		return f
	}
	return b.f
}

func (be *Backend) Binary(op mx.BinaryOp, a, b *mx.Array, out []int, dt mx.DType) (mx.Handle, error) {
	if binaryFunc(op) == nil {
		return nil, fmt.Errorf("cpu: binary op %d not supported", op)
	}
	if (op == mx.OpEqual) && a.DType() == b.DType() && (a.DType() == mx.Int32 || a.DType() == mx.Uint32) {
		// Exact integer equality: float32 would merge large ids.
		return be.intEqual(a, b, out), nil
	}
	af, bf := asFloat(a), asFloat(b)
	res := newF(numel(out)) // every case below writes every element
	n := len(res)
	switch {
	case n == 0:
	case len(af) == n && len(bf) == n:
		parallel(n, elemGrain, func(lo, hi int) { binaryKernel(op, res[lo:hi], af[lo:hi], 1, bf[lo:hi], 1) })
	case len(af) == n && len(bf) == 1:
		parallel(n, elemGrain, func(lo, hi int) { binaryKernel(op, res[lo:hi], af[lo:hi], 1, bf, 0) })
	case len(af) == 1 && len(bf) == n:
		parallel(n, elemGrain, func(lo, hi int) { binaryKernel(op, res[lo:hi], af, 0, bf[lo:hi], 1) })
	default:
		sa, sb := bstrides(a.Shape(), out), bstrides(b.Shape(), out)
		inner := 1
		var ia, ib int
		if len(out) > 0 {
			inner, ia, ib = out[len(out)-1], sa[len(out)-1], sb[len(out)-1]
		}
		if inner == 0 {
			break
		}
		nrows := n / inner
		parallel(nrows, max(1, elemGrain/inner), func(lo, hi int) {
			rows(out, [][]int{sa, sb}, []int{0, 0}, lo, hi, func(row int, offs []int) {
				binaryKernel(op, res[row*inner:(row+1)*inner], af[offs[0]:], ia, bf[offs[1]:], ib)
			})
		})
	}
	if dt == mx.Bool {
		bb := make([]uint8, n)
		for i, v := range res {
			if v != 0 {
				bb[i] = 1
			}
		}
		fbuf(res) // released with the dropped buf
		return &buf{b: bb}, nil
	}
	roundTo(dt, res)
	return fbuf(res), nil
}

func (be *Backend) intEqual(a, b *mx.Array, out []int) *buf {
	n := numel(out)
	ai, bi := h(broadcastTo(a, out)), h(broadcastTo(b, out))
	res := make([]uint8, n)
	for i := 0; i < n; i++ {
		var eq bool
		if a.DType() == mx.Int32 {
			eq = ai.i[i] == bi.i[i]
		} else {
			eq = ai.u[i] == bi.u[i]
		}
		if eq {
			res[i] = 1
		}
	}
	return &buf{b: res}
}

// broadcastTo materializes x broadcast to shape (x itself if already that shape).
func broadcastTo(x *mx.Array, shape []int) *mx.Array {
	if numel(x.Shape()) == numel(shape) {
		return x
	}
	b := gatherBuf(x.DType(), h(x), numel(shape), shape, bstrides(x.Shape(), shape), 0)
	return mx.Wrap(x.Backend(), b, shape, x.DType())
}

func (be *Backend) Broadcast(x *mx.Array, shape []int) (mx.Handle, error) {
	return gatherOut(x.DType(), h(x), numel(shape), shape, bstrides(x.Shape(), shape), 0), nil
}

func (be *Backend) Transpose(x *mx.Array, perm []int) (mx.Handle, error) {
	xs, st := x.Shape(), stridesOf(x.Shape())
	shape, strides := make([]int, len(perm)), make([]int, len(perm))
	for i, p := range perm {
		shape[i], strides[i] = xs[p], st[p]
	}
	return gatherOut(x.DType(), h(x), numel(shape), shape, strides, 0), nil
}

// truthy returns cond's values as 0/1 bytes.
func truthy(c *mx.Array) []uint8 {
	b := h(c)
	switch c.DType() {
	case mx.Uint8, mx.Bool:
		return b.b
	}
	f := asFloat(c)
	t := make([]uint8, len(f))
	for i, v := range f {
		if v != 0 {
			t[i] = 1
		}
	}
	return t
}

func (be *Backend) Where(cond, a, b *mx.Array, out []int, dt mx.DType) (mx.Handle, error) {
	n := numel(out)
	c := gatherBuf(mx.Uint8, &buf{b: truthy(cond)}, n, out, bstrides(cond.Shape(), out), 0).b
	if !dt.IsFloat() {
		if a.DType() != b.DType() {
			return nil, fmt.Errorf("cpu: where on %s and %s", a.DType(), b.DType())
		}
		ab, bb := h(broadcastTo(a, out)), h(broadcastTo(b, out))
		res := gatherBuf(dt, ab, n, []int{n}, []int{1}, 0)
		for i := 0; i < n; i++ {
			if c[i] == 0 {
				switch dt {
				case mx.Int32:
					res.i[i] = bb.i[i]
				case mx.Uint32:
					res.u[i] = bb.u[i]
				default:
					res.b[i] = bb.b[i]
				}
			}
		}
		return res, nil
	}
	af := gatherBuf(mx.Float32, &buf{f: asFloat(a)}, n, out, bstrides(a.Shape(), out), 0).f
	bf := gatherBuf(mx.Float32, &buf{f: asFloat(b)}, n, out, bstrides(b.Shape(), out), 0).f
	parallel(n, elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if c[i] == 0 {
				af[i] = bf[i]
			}
		}
	})
	roundTo(dt, af)
	return &buf{f: af}, nil
}

func (be *Backend) AsType(x *mx.Array, dt mx.DType) (mx.Handle, error) {
	src := h(x)
	n := x.Size()
	if dt.IsFloat() {
		src := asFloat(x)
		f := newF(len(src))
		copy(f, src)
		roundTo(dt, f)
		return fbuf(f), nil
	}
	if x.DType().IsFloat() {
		// Float to integer truncates toward zero, as C and MLX do; out of range saturates.
		r := &buf{}
		switch dt {
		case mx.Int32:
			r.i = make([]int32, n)
			for i, v := range src.f {
				r.i[i] = int32(max(min(float64(v), math.MaxInt32), math.MinInt32))
			}
		case mx.Uint32:
			r.u = make([]uint32, n)
			for i, v := range src.f {
				r.u[i] = uint32(max(min(float64(v), math.MaxUint32), 0))
			}
		case mx.Bool:
			r.b = truthy(x)
		default:
			r.b = make([]uint8, n)
			for i, v := range src.f {
				r.b[i] = uint8(max(min(float64(v), 255), 0))
			}
		}
		return r, nil
	}
	// Integer to integer goes through int64.
	get := func(i int) int64 {
		switch x.DType() {
		case mx.Int32:
			return int64(src.i[i])
		case mx.Uint32:
			return int64(src.u[i])
		}
		return int64(src.b[i])
	}
	r := &buf{}
	switch dt {
	case mx.Int32:
		r.i = make([]int32, n)
		for i := range r.i {
			r.i[i] = int32(get(i))
		}
	case mx.Uint32:
		r.u = make([]uint32, n)
		for i := range r.u {
			r.u[i] = uint32(get(i))
		}
	case mx.Bool:
		r.b = make([]uint8, n)
		for i := range r.b {
			if get(i) != 0 {
				r.b[i] = 1
			}
		}
	default:
		r.b = make([]uint8, n)
		for i := range r.b {
			r.b[i] = uint8(get(i))
		}
	}
	return r, nil
}
