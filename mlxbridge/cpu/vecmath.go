package cpu

// #cgo CFLAGS: -O3
// #cgo LDFLAGS: -lm
// #include "vecmath.h"
import "C"

import "unsafe"

func cf(v []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(v))) }

// vecRows runs a C row kernel over rows of length d, split across cores.
func vecRows(out, x []float32, outLen, d int, kernel func(out, x *C.float, rows, d C.size_t)) {
	if d == 0 {
		return
	}
	rows := len(x) / d
	parallel(rows, max(1, elemGrain/d), func(lo, hi int) {
		kernel(cf(out[lo*outLen:]), cf(x[lo*d:]), C.size_t(hi-lo), C.size_t(d))
	})
}

func softmaxRows(out, x []float32, d int) {
	vecRows(out, x, d, d, func(o, i *C.float, r, n C.size_t) { C.inloop_softmax_rows(o, i, r, n) })
}

// rmsNormRows normalizes the rows of x (length d = len(w)) into out, scaled by w.
func rmsNormRows(out, x, w []float32, d int, eps float32) {
	vecRows(out, x, d, d, func(o, in *C.float, r, n C.size_t) {
		C.inloop_rmsnorm_rows(o, in, cf(w), r, n, C.float(eps))
	})
}

// ropeRows turns rows [lo, hi) of x (rows of d, row r at position r%l) into out by the
// angles cos and sin (dims/2 a position).
func ropeRows(out, x, cos, sin []float32, lo, hi, d, l, dims int, traditional bool) {
	if hi <= lo {
		return
	}
	tr := 0
	if traditional {
		tr = 1
	}
	C.inloop_rope_rows(cf(out), cf(x), cf(cos), cf(sin), C.size_t(lo), C.size_t(hi-lo), C.size_t(d), C.size_t(l),
		C.size_t(dims), C.int(tr))
}

// binaryVec is inloop_binary over len(out) elements, on the calling goroutine.
func binaryVec(op int, out, a []float32, as int, b []float32, bs int) {
	C.inloop_binary(C.int(op), cf(out), cf(a), C.int(as), cf(b), C.int(bs), C.size_t(len(out)))
}

// xentGradRows is the cross-entropy's backward pass over rows of length d (see
// inloop_xent_grad_rows); t holds each row's target, in [0, d).
func xentGradRows(out, x, lse, g []float32, t []int32, d int) {
	parallel(len(t), max(1, elemGrain/d), func(lo, hi int) {
		C.inloop_xent_grad_rows(cf(out[lo*d:]), cf(x[lo*d:]), cf(lse[lo:]), cf(g[lo:]),
			(*C.int32_t)(unsafe.Pointer(&t[lo])), C.size_t(hi-lo), C.size_t(d))
	})
}

// adamVec is inloop_adam over len(po) elements, on the calling goroutine; m
// and v nil are zero moments.
func adamVec(po, mo, vo, p, g, m, v []float32, k *adamK) {
	if len(po) == 0 {
		return
	}
	var mp, vp *C.float
	if m != nil {
		mp, vp = cf(m), cf(v)
	}
	C.inloop_adam(cf(po), cf(mo), cf(vo), cf(p), cf(g), mp, vp, C.size_t(len(po)), (*C.float)(unsafe.Pointer(k)))
}

// limitAdam caps inloop_adam's vector level (2 AVX-512, 1 AVX, 0 scalar; -1
// lifts the cap); tests use it to cover every form on one machine.
func limitAdam(level int) { C.inloop_adam_limit(C.int(level)) }

func logSumExpRows(out, x []float32, d int) {
	vecRows(out, x, 1, d, func(o, i *C.float, r, n C.size_t) { C.inloop_logsumexp_rows(o, i, r, n) })
}

// vecMap applies an elementwise C kernel across cores.
func vecMap(y, x []float32, kernel func(y, x *C.float, n C.size_t)) {
	parallel(len(x), elemGrain, func(lo, hi int) { kernel(cf(y[lo:]), cf(x[lo:]), C.size_t(hi-lo)) })
}

func expVec(y, x []float32) { vecMap(y, x, func(a, b *C.float, n C.size_t) { C.inloop_exp(a, b, n) }) }
func siluVec(y, x []float32) {
	vecMap(y, x, func(a, b *C.float, n C.size_t) { C.inloop_silu(a, b, n) })
}
func siluGradVec(y, x []float32) {
	vecMap(y, x, func(a, b *C.float, n C.size_t) { C.inloop_silu_grad(a, b, n) })
}
func sigmoidVec(y, x []float32) {
	vecMap(y, x, func(a, b *C.float, n C.size_t) { C.inloop_sigmoid(a, b, n) })
}

// softmaxCausalRows turns rows of raw scores (L, S) into attention probabilities in
// place: row i keeps the first firstLimit+i keys, scaled, and masks the rest.
func softmaxCausalRows(p []float32, rows, d, firstLimit int, scale float32) {
	if rows == 0 || d == 0 {
		return
	}
	C.inloop_softmax_causal_rows(cf(p), C.size_t(rows), C.size_t(d), C.size_t(firstLimit), C.float(scale))
}

// softmaxPart is one piece of a row's softmax for a split decode step, in place:
// p[r·ld + j] = e^(p[r·ld + j]·scale − m[r]) for j < n, with m[r] the row's largest scaled
// score and l[r] the sum of its n values (inloop_softmax_part).
func softmaxPart(p []float32, rows, ld, n int, scale float32, m, l []float32) {
	if rows == 0 || n == 0 {
		return
	}
	C.inloop_softmax_part(cf(p), C.size_t(rows), C.size_t(ld), C.size_t(n), C.float(scale), cf(m), cf(l))
}

// attendScores sets p[r·ld+j] = q_r·k_j for the rows of q (rows, d) and keys of k (s, d).
func attendScores(p []float32, ld int, q []float32, rows, d int, k []float32, s int) {
	if rows == 0 || s == 0 {
		return
	}
	C.inloop_attend_scores(cf(p), C.size_t(ld), cf(q), C.size_t(rows), C.size_t(d), cf(k), C.size_t(s))
}

// attendValues adds Σ_j p[r·ld+j]·v_j to each row r of out (rows, dv), over the
// values of v (s, dv).
func attendValues(out []float32, rows, dv int, p []float32, ld int, v []float32, s int) {
	if rows == 0 || s == 0 {
		return
	}
	C.inloop_attend_values(cf(out), C.size_t(rows), C.size_t(dv), cf(p), C.size_t(ld), cf(v), C.size_t(s))
}

func cu(v []uint32) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(v))) }

// attendQuantScores is attendScores over n quantized keys (inloop_attend_quant_scores).
func attendQuantScores(p []float32, ld int, q, qsum []float32, rows, dp, group, bits int, w []uint32, s, b []float32, n int, tmp []float32) {
	if rows == 0 || n == 0 {
		return
	}
	C.inloop_attend_quant_scores(cf(p), C.size_t(ld), cf(q), cf(qsum), C.size_t(rows), C.size_t(dp), C.size_t(group),
		C.int(bits), cu(w), cf(s), cf(b), C.size_t(n), cf(tmp))
}

// attendQuantValues is attendValues over n quantized values (inloop_attend_quant_values).
func attendQuantValues(out []float32, rows, dv int, p []float32, ld, dp, group, bits int, w []uint32, s, b []float32, n int, tmp []float32) {
	if rows == 0 || n == 0 {
		return
	}
	C.inloop_attend_quant_values(cf(out), C.size_t(rows), C.size_t(dv), cf(p), C.size_t(ld), C.size_t(dp), C.size_t(group),
		C.int(bits), cu(w), cf(s), cf(b), C.size_t(n), cf(tmp))
}

// quantBlock·dp floats is the tmp attendQuantValues takes (it dequantizes that
// many positions at a time) and attendQuantScores (which needs 8·dp).
const quantBlock = 32

// bf16Block·d floats is the tmp attendBF16Scores takes: the query rows laid out
// for the 16-bit kernel (up to bf16Block rows), or a block of widened keys.
const bf16Block = 64

func cu16(v []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(v))) }

// attendBF16Scores is attendScores over s bfloat16 keys.
func attendBF16Scores(p []float32, ld int, q []float32, rows, d int, k []uint16, s int, tmp []float32) {
	if rows == 0 || s == 0 {
		return
	}
	C.inloop_attend_bf16_scores(cf(p), C.size_t(ld), cf(q), C.size_t(rows), C.size_t(d), cu16(k), C.size_t(s), cf(tmp))
}

// attendBF16Values is attendValues over s bfloat16 values.
func attendBF16Values(out []float32, rows, dv int, p []float32, ld int, v []uint16, s int) {
	if rows == 0 || s == 0 {
		return
	}
	C.inloop_attend_bf16_values(cf(out), C.size_t(rows), C.size_t(dv), cf(p), C.size_t(ld), cu16(v), C.size_t(s))
}

// addLowRank is out = y + scale·(x·a)·b for rows of x (k), a (k, r), b (r, n).
func addLowRank(out, y, x []float32, rows, k int, a []float32, r int, b []float32, n int, scale float32) {
	C.inloop_add_low_rank(cf(out), cf(y), cf(x), C.size_t(rows), C.size_t(k), cf(a), C.size_t(r), cf(b), C.size_t(n), C.float(scale))
}
