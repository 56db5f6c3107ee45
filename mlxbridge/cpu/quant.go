package cpu

import (
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/qmm"
)

// QuantizedMatMul runs the fused kernels of internal/qmm: packed words are unpacked
// group by group on the fly (decode streams the weights once), never into a whole
// dequantized matrix. Float16/BFloat16 scales are already float32 here.
func (be *Backend) QuantizedMatMul(x, w, scales, biases *mx.Array, transpose bool, groupSize, bits int, out []int) (mx.Handle, error) {
	ws := w.Shape()
	n := ws[0]
	k := ws[1] * 32 / bits
	xf := h(x).f
	res := newF(numel(out))
	if transpose { // x (M, K) -> (M, N)
		m := len(xf) / max(k, 1)
		qmm.MatMulT(res, xf, m, k, h(w).u, h(scales).f, h(biases).f, n, groupSize, bits)
	} else { // x (M, N) -> (M, K)
		m := len(xf) / max(n, 1)
		qmm.MatMul(res, xf, m, n, h(w).u, h(scales).f, h(biases).f, k, groupSize, bits)
	}
	roundTo(x.DType(), res)
	return fbuf(res), nil
}
