package mlxbridge

// An optimizer step is a dozen elementwise ops per parameter, and an adapter
// has dozens of small parameters: issued one by one, the ops cost more than
// their arithmetic (a LoRA step on a small model spent a third of its time
// there). The two ops below are that step's hot part, fused where a backend
// can; composed from the plain ops elsewhere, with the same numbers.

// AdamCoeffs are the numbers of one Adam(W) update (see AdamUpdate). Each is
// rounded to float32 and then to the parameter's dtype, as the scalar operand
// of an elementwise op would be.
type AdamCoeffs struct {
	B1, C1 float64 // m ← B1·m + C1·g
	B2, C2 float64 // v ← B2·v + C2·g²
	Decay  float64 // p ← Decay·p (1 − lr·λ, decoupled weight decay; 1 for none)
	Num    float64 // the step's numerator is Num·m
	Div    float64 // its denominator √v/Div + Eps (1 for no bias correction)
	Eps    float64
}

// AdamUpdate is one Adam(W) update of parameter p with gradient g and moments
// m and v, all four of one float dtype and shape:
//
//	m' = B1·m + C1·g
//	v' = B2·v + C2·g²
//	p' = Decay·p − (Num·m') / (√v'/Div + Eps)
//
// every product, sum and quotient rounded to the dtype in that order: the
// numbers of the same ops issued one at a time. m and v both nil are zero
// moments (a first update), with the same numbers as arrays of zeros, which
// the caller then need not make. A backend with a fused kernel (AdamUpdater)
// reads each input once and writes the three outputs in one pass. Not
// differentiable: traced inputs take the composed path.
func AdamUpdate(p, g, m, v *Array, c AdamCoeffs) (p2, m2, v2 *Array) {
	if (m == nil) != (v == nil) {
		e := Errorf("adam update: one moment given without the other")
		return e, e, e
	}
	in := []*Array{p, g}
	if m != nil {
		in = append(in, m, v)
	}
	if e := checkFloat("adam update", in...); e != nil {
		return e, e, e
	}
	for _, x := range in[1:] {
		if x.dtype != p.dtype || !sameShape(x.shape, p.shape) {
			e := Errorf("adam update: %s %s with parameter %s %s", x.dtype, fmtShape(x.shape), p.dtype, fmtShape(p.shape))
			return e, e, e
		}
	}
	if f, ok := p.b.(AdamUpdater); ok && !traced(in...) {
		hp, hm, hv, err := f.AdamUpdate(p, g, m, v, c)
		keepAlive(in)
		return newArray("adam update", p.b, hp, err, p.shape, p.dtype),
			newArray("adam update", p.b, hm, err, p.shape, p.dtype),
			newArray("adam update", p.b, hv, err, p.shape, p.dtype)
	}
	if m == nil {
		m, v = ZerosLike(p), ZerosLike(p)
	}
	s := func(v float64) *Array { return scalarLike(p, float32(v)) }
	m2 = Add(Mul(m, s(c.B1)), Mul(g, s(c.C1)))
	v2 = Add(Mul(v, s(c.B2)), Mul(Square(g), s(c.C2)))
	if c.Decay != 1 {
		p = Mul(p, s(c.Decay))
	}
	den := Sqrt(v2)
	if c.Div != 1 {
		den = Div(den, s(c.Div))
	}
	p2 = Sub(p, Div(Mul(m2, s(c.Num)), Add(den, s(c.Eps))))
	return p2, m2, v2
}

// GlobalNorm is the L2 norm of every element of xs taken as one vector,
// √Σx², as a Float32 0-d array (0 for no arrays). A backend with a fused
// kernel (GlobalNormer) reads each array once and sums in float64, so the
// result is infinite only when an element is, or the norm itself exceeds
// float32's range; composed, the squares are summed in float32 and overflow
// past √(3.4e38) ≈ 1.8e19. A NaN anywhere makes it NaN. Not differentiable.
func GlobalNorm(b Backend, xs ...*Array) *Array {
	if len(xs) == 0 {
		return Full(b, nil, 0, Float32)
	}
	if e := checkFloat("global norm", xs...); e != nil {
		return e
	}
	if xs[0].b != b {
		return Errorf("global norm: arrays from backend %s, want %s", xs[0].b.Name(), b.Name())
	}
	if f, ok := b.(GlobalNormer); ok && !traced(xs...) {
		h, err := f.GlobalNorm(xs)
		keepAlive(xs)
		return newArray("global norm", b, h, err, []int{}, Float32)
	}
	var sq *Array
	for _, x := range xs {
		s := Sum(Square(AsType(x, Float32)), nil, false)
		if sq == nil {
			sq = s
		} else {
			sq = Add(sq, s)
		}
	}
	return Sqrt(sq)
}
