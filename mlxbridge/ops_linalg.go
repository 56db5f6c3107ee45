package mlxbridge

// Matmul multiplies the last two axes, a (..., M, K) @ b (..., K, N), broadcasting
// the batch axes. Both inputs need at least two dimensions.
func Matmul(a, b *Array) *Array { return MatmulT(a, b, false, false) }

// MatmulT is Matmul with either operand's last two axes transposed, without a copy:
// MatmulT(x, w, false, true) is x @ wᵀ, the Linear layer.
func MatmulT(a, b *Array, transA, transB bool) *Array {
	if e := checkFloat("matmul", a, b); e != nil {
		return e
	}
	if len(a.shape) < 2 || len(b.shape) < 2 {
		return Errorf("matmul: needs 2 or more dimensions, got %s and %s", fmtShape(a.shape), fmtShape(b.shape))
	}
	m, k1 := a.shape[len(a.shape)-2], a.shape[len(a.shape)-1]
	if transA {
		m, k1 = k1, m
	}
	k2, n := b.shape[len(b.shape)-2], b.shape[len(b.shape)-1]
	if transB {
		k2, n = n, k2
	}
	if k1 != k2 {
		return Errorf("matmul: inner dimensions differ: %s%s @ %s%s", fmtShape(a.shape), tmark(transA), fmtShape(b.shape), tmark(transB))
	}
	batch, err := broadcastShapes(a.shape[:len(a.shape)-2], b.shape[:len(b.shape)-2])
	if err != nil {
		return Errorf("matmul: batch %v", err)
	}
	out := append(batch, m, n)
	dt := promote(a.dtype, b.dtype)
	h, err := a.b.MatMul(a, b, transA, transB, out)
	keepAlive(a, b)
	res := newArray("matmul", a.b, h, err, out, dt)
	return record(res, func(g *Array) []*Array {
		var ga, gb *Array
		needA, needB := a.node != nil, b.node != nil
		a, b := StopGradient(a), StopGradient(b)
		if needA {
			if transA { // dA = op(B) Gᵀ
				ga = MatmulT(b, g, transB, true)
			} else { // dA = G op(B)ᵀ
				ga = MatmulT(g, b, false, !transB)
			}
			ga = unbroadcast(ga, a.shape)
		}
		if needB && len(b.shape) == 2 && len(a.shape) > 2 && !transA {
			// A weight against a batch of inputs: one product over every
			// row of the batch, instead of one per batch entry summed after.
			a2, g2 := Reshape(a, -1, k1), Reshape(g, -1, n)
			if transB { // dB = Gᵀ A
				gb = MatmulT(g2, a2, true, false)
			} else { // dB = Aᵀ G
				gb = MatmulT(a2, g2, true, false)
			}
		} else if needB {
			if transB { // dB = Gᵀ op(A)
				gb = MatmulT(g, a, true, transA)
			} else { // dB = op(A)ᵀ G
				gb = MatmulT(a, g, !transA, false)
			}
			gb = unbroadcast(gb, b.shape)
		}
		return []*Array{ga, gb}
	}, a, b)
}

// MatmulTBF16 is MatmulT(x, w, false, true), x @ wᵀ (the Linear layer), with every
// value of x rounded to bfloat16 where that is faster: w a bfloat16 matrix (N, K) the
// backend multiplies in bfloat16 pairs (TakesBF16Rows), x float32 with more than one row
// (a prompt), nothing traced. Products of two bfloat16 values are exact, so a result
// moves only by x's rounding, at most 2⁻⁹ of each |w·x|, as llama.cpp multiplies its
// 16-bit weights. Every row is rounded alone, so a row's result does not depend on the
// rows beside it. Anywhere else it is MatmulT, exactly.
func MatmulTBF16(x, w *Array) *Array {
	if x == nil || w == nil || x.err != nil || w.err != nil || x.dtype != Float32 || len(w.shape) != 2 ||
		len(x.shape) < 2 || oneRow(x) || x.shape[len(x.shape)-1] != w.shape[1] ||
		x.b != w.b || traced(x, w) || !TakesBF16Rows(w) {
		return MatmulT(x, w, false, true)
	}
	out := append(clone(x.shape[:len(x.shape)-1]), w.shape[0])
	h, err := x.b.(BF16MatMuler).MatMulBF16(x, w, out)
	keepAlive(x, w)
	return newArray("matmul_bf16", x.b, h, err, out, Float32)
}

// TakesBF16Rows reports whether MatmulTBF16 multiplies many rows of x by w in
// bfloat16 pairs on w's backend (elsewhere it is the exact product).
func TakesBF16Rows(w *Array) bool {
	if w == nil || w.err != nil || w.dtype != BFloat16 {
		return false
	}
	q, ok := w.b.(BF16MatMuler)
	return ok && q.TakesBF16(w)
}

// HasBF16Rows reports whether MatmulTBF16 multiplies by some matrices in bfloat16
// pairs on b: on the cpu backend, a 16-bit checkpoint's weights kept compact, on a
// CPU with AVX-512 BF16.
func HasBF16Rows(b Backend) bool {
	q, ok := b.(BF16MatMuler)
	return ok && q.HasBF16Rows()
}

// lowRankRows is the most rows of x AddLowRank hands to a fused kernel: a
// decode step's one row, or a few. Past it the two products run as GEMMs.
const lowRankRows = 8

// AddLowRank returns y + scale·(x @ a) @ b: a LoRA update added to the output y
// (..., N) of a layer whose input is x (..., K), with a (K, R) and b (R, N).
// Where nothing is traced, every array is float32 and x has at most a few rows
// (decoding), a backend with a fused kernel (LowRankAdder) computes it in one
// op; otherwise it is the ops it names, in that order, gradients included.
func AddLowRank(y, x, a, b *Array, scale float32) *Array {
	if fusesLowRank(y, x, a, b) {
		if f, ok := x.b.(LowRankAdder); ok {
			h, err := f.AddLowRank(y, x, a, b, scale)
			keepAlive(y, x, a, b)
			return newArray("add_low_rank", x.b, h, err, clone(y.shape), Float32)
		}
	}
	return Add(y, MulScalar(Matmul(Matmul(x, a), b), scale))
}

// fusesLowRank reports whether AddLowRank's arrays suit the fused kernel: valid,
// on one backend, float32, untraced, of matching shapes with no broadcast, and
// x of at most lowRankRows rows.
func fusesLowRank(y, x, a, b *Array) bool {
	if check("add_low_rank", y, x, a, b) != nil || traced(y, x, a, b) {
		return false
	}
	for _, v := range []*Array{y, x, a, b} {
		if v.dtype != Float32 {
			return false
		}
	}
	if len(x.shape) < 1 || len(a.shape) != 2 || len(b.shape) != 2 || len(y.shape) != len(x.shape) {
		return false
	}
	k := x.shape[len(x.shape)-1]
	if k == 0 || a.shape[0] != k || a.shape[1] != b.shape[0] || a.shape[1] == 0 || y.shape[len(y.shape)-1] != b.shape[1] {
		return false
	}
	for i := range len(x.shape) - 1 {
		if y.shape[i] != x.shape[i] {
			return false
		}
	}
	rows := x.Size() / k
	return rows >= 1 && rows <= lowRankRows && y.Size() > 0
}

func tmark(t bool) string {
	if t {
		return "ᵀ"
	}
	return ""
}
