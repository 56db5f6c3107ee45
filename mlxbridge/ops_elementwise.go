package mlxbridge

import "fmt"

var unaryNames = map[UnaryOp]string{
	OpNeg: "neg", OpExp: "exp", OpLog: "log", OpSqrt: "sqrt", OpRsqrt: "rsqrt", OpSilu: "silu",
	OpGelu: "gelu", OpGeluApprox: "gelu_approx", OpSigmoid: "sigmoid", OpTanh: "tanh", OpAbs: "abs",
	OpSquare: "square", OpSign: "sign", OpSiluGrad: "silu_grad", OpGeluGrad: "gelu_grad",
	OpGeluApproxGrad: "gelu_approx_grad",
}

func unary(op UnaryOp, x *Array) *Array {
	name := unaryNames[op]
	if e := checkFloat(name, x); e != nil {
		return e
	}
	h, err := x.b.Unary(op, x)
	keepAlive(x)
	out := newArray(name, x.b, h, err, x.shape, x.dtype)
	return record(out, func(g *Array) []*Array {
		return []*Array{unaryVJP(op, StopGradient(x), StopGradient(out), g)}
	}, x)
}

func unaryVJP(op UnaryOp, x, y, g *Array) *Array {
	switch op {
	case OpNeg:
		return Neg(g)
	case OpExp:
		return Mul(g, y)
	case OpLog:
		return Div(g, x)
	case OpSqrt:
		return Div(Mul(g, scalarLike(g, 0.5)), y)
	case OpRsqrt: // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
		return Mul(g, Mul(scalarLike(g, -0.5), Mul(y, Square(y))))
	case OpSilu:
		return Mul(g, unary(OpSiluGrad, StopGradient(x)))
	case OpGelu:
		return Mul(g, unary(OpGeluGrad, StopGradient(x)))
	case OpGeluApprox:
		return Mul(g, unary(OpGeluApproxGrad, StopGradient(x)))
	case OpSigmoid:
		return Mul(g, Mul(y, Sub(scalarLike(y, 1), y)))
	case OpTanh:
		return Mul(g, Sub(scalarLike(y, 1), Square(y)))
	case OpAbs:
		return Mul(g, Sign(x))
	case OpSquare:
		return Mul(g, Mul(scalarLike(x, 2), x))
	}
	return Errorf("%s: no gradient", unaryNames[op])
}

func Neg(x *Array) *Array     { return unary(OpNeg, x) }
func Exp(x *Array) *Array     { return unary(OpExp, x) }
func Log(x *Array) *Array     { return unary(OpLog, x) }
func Sqrt(x *Array) *Array    { return unary(OpSqrt, x) }
func Rsqrt(x *Array) *Array   { return unary(OpRsqrt, x) }
func Silu(x *Array) *Array    { return unary(OpSilu, x) }
func Sigmoid(x *Array) *Array { return unary(OpSigmoid, x) }
func Tanh(x *Array) *Array    { return unary(OpTanh, x) }
func Abs(x *Array) *Array     { return unary(OpAbs, x) }
func Square(x *Array) *Array  { return unary(OpSquare, x) }
func Sign(x *Array) *Array    { return StopGradient(unary(OpSign, StopGradient(x))) }

// Gelu is the exact GELU, x·Φ(x); GeluApprox is the tanh approximation.
func Gelu(x *Array) *Array       { return unary(OpGelu, x) }
func GeluApprox(x *Array) *Array { return unary(OpGeluApprox, x) }

var binaryNames = map[BinaryOp]string{
	OpAdd: "add", OpSub: "sub", OpMul: "mul", OpDiv: "div", OpMaximum: "maximum", OpMinimum: "minimum",
	OpPower: "power", OpGreater: "greater", OpGreaterEqual: "greater_equal", OpLess: "less", OpEqual: "equal",
}

func binaryOp(op BinaryOp, a, b *Array) *Array {
	name := binaryNames[op]
	if op.isCompare() {
		if e := check(name, a, b); e != nil {
			return e
		}
		if a.dtype.IsFloat() != b.dtype.IsFloat() {
			return Errorf("%s: cannot compare %s with %s", name, a.dtype, b.dtype)
		}
	} else if e := checkFloat(name, a, b); e != nil {
		return e
	}
	shape, err := broadcastShapes(a.shape, b.shape)
	if err != nil {
		return Errorf("%s: %v", name, err)
	}
	dt := promote(a.dtype, b.dtype)
	if op.isCompare() {
		dt = Bool
	}
	h, err := a.b.Binary(op, a, b, shape, dt)
	keepAlive(a, b)
	out := newArray(name, a.b, h, err, shape, dt)
	if op.isCompare() {
		return out
	}
	return record(out, func(g *Array) []*Array {
		ga, gb := binaryVJP(op, a, b, out, g)
		if ga != nil {
			ga = unbroadcast(ga, a.shape)
		}
		if gb != nil {
			gb = unbroadcast(gb, b.shape)
		}
		return []*Array{ga, gb}
	}, a, b)
}

// binaryVJP returns the cotangents of a and b, computing only those that are traced.
func binaryVJP(op BinaryOp, a, b, y, g *Array) (ga, gb *Array) {
	needA, needB := a.node != nil, b.node != nil
	zero := func() *Array { return scalarLike(g, 0) }
	switch op {
	case OpAdd:
		return g, g
	case OpSub:
		if needB {
			gb = Neg(g)
		}
		return g, gb
	case OpMul:
		if needA {
			ga = Mul(g, StopGradient(b))
		}
		if needB {
			gb = Mul(g, StopGradient(a))
		}
		return ga, gb
	case OpDiv:
		if needA {
			ga = Div(g, StopGradient(b))
		}
		if needB {
			gb = Neg(Div(Mul(g, StopGradient(a)), Square(StopGradient(b))))
		}
		return ga, gb
	case OpMaximum, OpMinimum:
		var m *Array // where a wins
		if op == OpMaximum {
			m = GreaterEqual(a, b)
		} else {
			m = GreaterEqual(b, a) // a ≤ b
		}
		if needA {
			ga = Where(m, g, zero())
		}
		if needB {
			gb = Where(m, zero(), g)
		}
		return ga, gb
	case OpPower: // d a^b = b·a^(b−1) da + a^b·ln(a) db
		sa, sb := StopGradient(a), StopGradient(b)
		if needA {
			ga = Mul(g, Mul(sb, Power(sa, Sub(sb, scalarLike(sb, 1)))))
		}
		if needB {
			gb = Mul(g, Mul(StopGradient(y), Log(sa)))
		}
		return ga, gb
	}
	e := Errorf("%s: no gradient", binaryNames[op])
	return e, e
}

func Add(a, b *Array) *Array     { return binaryOp(OpAdd, a, b) }
func Sub(a, b *Array) *Array     { return binaryOp(OpSub, a, b) }
func Mul(a, b *Array) *Array     { return binaryOp(OpMul, a, b) }
func Div(a, b *Array) *Array     { return binaryOp(OpDiv, a, b) }
func Maximum(a, b *Array) *Array { return binaryOp(OpMaximum, a, b) }
func Minimum(a, b *Array) *Array { return binaryOp(OpMinimum, a, b) }
func Power(a, b *Array) *Array   { return binaryOp(OpPower, a, b) }

// Comparisons give Bool arrays and carry no gradient.
func Greater(a, b *Array) *Array      { return binaryOp(OpGreater, a, b) }
func GreaterEqual(a, b *Array) *Array { return binaryOp(OpGreaterEqual, a, b) }
func Less(a, b *Array) *Array         { return binaryOp(OpLess, a, b) }
func Equal(a, b *Array) *Array        { return binaryOp(OpEqual, a, b) }

// AddScalar, MulScalar: x+v and x·v with v a Go number, in x's dtype.
func AddScalar(x *Array, v float32) *Array {
	if e := checkFloat("add", x); e != nil {
		return e
	}
	return Add(x, scalarLike(x, v))
}

func MulScalar(x *Array, v float32) *Array {
	if e := checkFloat("mul", x); e != nil {
		return e
	}
	return Mul(x, scalarLike(x, v))
}

// Where picks a where cond is nonzero, else b; all three broadcast together.
func Where(cond, a, b *Array) *Array {
	if e := check("where", cond, a, b); e != nil {
		return e
	}
	if a.dtype.IsFloat() != b.dtype.IsFloat() {
		return Errorf("where: %s and %s", a.dtype, b.dtype)
	}
	s1, err := broadcastShapes(cond.shape, a.shape)
	if err == nil {
		s1, err = broadcastShapes(s1, b.shape)
	}
	if err != nil {
		return Errorf("where: %v", err)
	}
	dt := promote(a.dtype, b.dtype)
	h, err := a.b.Where(cond, a, b, s1, dt)
	keepAlive(cond, a, b)
	out := newArray("where", a.b, h, err, s1, dt)
	if !dt.IsFloat() {
		return out
	}
	return record(out, func(g *Array) []*Array {
		zero := scalarLike(g, 0)
		return []*Array{nil, unbroadcast(Where(cond, g, zero), a.shape), unbroadcast(Where(cond, zero, g), b.shape)}
	}, cond, a, b)
}

// AsType converts x to dt. Between float dtypes it is differentiable.
func AsType(x *Array, dt DType) *Array {
	if e := check("astype", x); e != nil {
		return e
	}
	if x.dtype == dt {
		return x
	}
	if int(dt) >= len(dtypeNames) {
		return Errorf("astype: unknown dtype %v", dt)
	}
	h, err := x.b.AsType(x, dt)
	keepAlive(x)
	out := newArray(fmt.Sprintf("astype %s", dt), x.b, h, err, x.shape, dt)
	if !x.dtype.IsFloat() || !dt.IsFloat() {
		return out
	}
	return record(out, func(g *Array) []*Array { return []*Array{AsType(g, x.dtype)} }, x)
}
