package cpu

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/qmm"
)

// QuantizedMatMul runs the fused kernels of internal/qmm: packed words are unpacked
// group by group on the fly (decode streams the weights once), never into a whole
// dequantized matrix. Float16/BFloat16 scales are already float32 here.
func (be *Backend) QuantizedMatMul(x, w, scales, biases *mx.Array, transpose bool, groupSize, bits int, out []int) (mx.Handle, error) {
	ws := w.Shape()
	nd := len(ws)
	n := ws[nd-2]
	k := ws[nd-1] * 32 / bits
	batch := numel(ws[:nd-2]) // 1 for a plain matrix
	xf, wu, sf, bf := h(x).f, h(w).u, h(scales).f, h(biases).f
	res := newF(numel(out))
	xn, rn := len(xf)/batch, len(res)/batch
	wn, gn := n*ws[nd-1], n*(k/groupSize)
	for i := range batch {
		xb, rb := xf[i*xn:(i+1)*xn], res[i*rn:(i+1)*rn]
		wb, sb, bb := wu[i*wn:(i+1)*wn], sf[i*gn:(i+1)*gn], bf[i*gn:(i+1)*gn]
		if transpose { // x (M, K) -> (M, N)
			qmm.MatMulT(rb, xb, len(xb)/max(k, 1), k, wb, sb, bb, n, groupSize, bits)
		} else { // x (M, N) -> (M, K)
			qmm.MatMul(rb, xb, len(xb)/max(n, 1), n, wb, sb, bb, k, groupSize, bits)
		}
	}
	roundTo(x.DType(), res)
	return fbuf(res), nil
}

// HasA8 reports whether this CPU has the integer kernels behind
// mx.QuantizedMatmulA8 for bits-bit weights: 4 bits on x86-64 with AVX2, 8 bits
// with AVX-512 VNNI.
func (be *Backend) HasA8(bits int) bool { return qmm.HasInt8(bits) }

// QuantizedMatMulA8 runs qmm's 8-bit-activation kernel (mx.QuantizedMatmulA8 asks
// HasA8 first).
func (be *Backend) QuantizedMatMulA8(x, w, scales, biases *mx.Array, groupSize, bits int, out []int) (mx.Handle, error) {
	if !qmm.HasInt8(bits) {
		return nil, fmt.Errorf("quantized_matmul_a8: no integer kernel for %d-bit weights on this CPU", bits)
	}
	ws := w.Shape()
	n, k := ws[0], ws[1]*32/bits
	res := newF(n)
	qmm.MatVecTInt8(res, h(x).f, k, h(w).u, h(scales).f, h(biases).f, n, groupSize, bits)
	roundTo(x.DType(), res)
	return fbuf(res), nil
}
