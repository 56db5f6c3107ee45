package mlxbridge

import (
	"github.com/inloop/inloop/mlxbridge/quant"
)

// Quantize packs w (..., K) in MLX's affine format: bits per value, one scale and
// bias per groupSize values of the last axis. It returns the Uint32 words
// (..., K·bits/32) and scales, biases (..., K/groupSize) in w's dtype. The numbers
// are bit-identical to MLX's mx.quantize, so checkpoints move between the two.
func Quantize(w *Array, groupSize, bits int) (wq, scales, biases *Array) {
	return QuantizeWith(w, groupSize, bits, quant.GPU)
}

// QuantizeWith is Quantize with the rounding of the given MLX kernel: quant.GPU
// (Quantize's, what MLX writes on a Mac) or quant.CPU (MLX on Linux without CUDA).
func QuantizeWith(w *Array, groupSize, bits int, k quant.Kernel) (wq, scales, biases *Array) {
	if e := checkFloat("quantize", w); e != nil {
		return e, e, e
	}
	if err := quant.Validate(bits, groupSize); err != nil {
		e := Errorf("quantize: %v", err)
		return e, e, e
	}
	if len(w.shape) < 1 || w.shape[len(w.shape)-1]%groupSize != 0 {
		e := Errorf("quantize: last axis of %s is not a multiple of group size %d", fmtShape(w.shape), groupSize)
		return e, e, e
	}
	vals, err := w.Float32s()
	if err != nil {
		e := errArray(err)
		return e, e, e
	}
	cols := w.shape[len(w.shape)-1]
	rows := w.Size() / max(cols, 1)
	packed, s, bs, err := quant.QuantizeWith(k, vals, rows, cols, groupSize, bits, rounder(w.dtype))
	if err != nil {
		e := Errorf("quantize: %v", err)
		return e, e, e
	}
	lead := clone(w.shape[:len(w.shape)-1])
	wq = FromData(w.b, Uint32, packed, append(clone(lead), quant.PackedLen(cols, bits))...)
	scales = FromData(w.b, w.dtype, s, append(clone(lead), cols/groupSize)...)
	biases = FromData(w.b, w.dtype, bs, append(clone(lead), cols/groupSize)...)
	return wq, scales, biases
}

// quantShape validates a quantized weight and returns its logical (rows, cols).
func quantShape(op string, w, scales, biases *Array, groupSize, bits int) (rows, cols int, e *Array) {
	if e := check(op, w, scales, biases); e != nil {
		return 0, 0, e
	}
	if err := quant.Validate(bits, groupSize); err != nil {
		return 0, 0, Errorf("%s: %v", op, err)
	}
	if w.dtype != Uint32 || !scales.dtype.IsFloat() || !biases.dtype.IsFloat() {
		return 0, 0, Errorf("%s: want uint32 weights and float scales/biases, got %s, %s, %s", op, w.dtype, scales.dtype, biases.dtype)
	}
	if len(w.shape) < 1 || !sameShape(scales.shape, biases.shape) || len(scales.shape) != len(w.shape) {
		return 0, 0, Errorf("%s: weights %s, scales %s, biases %s", op, fmtShape(w.shape), fmtShape(scales.shape), fmtShape(biases.shape))
	}
	nd := len(w.shape)
	cols = w.shape[nd-1] * 32 / bits
	if w.shape[nd-1]*32%bits != 0 || scales.shape[nd-1]*groupSize != cols || !sameShape(w.shape[:nd-1], scales.shape[:nd-1]) {
		return 0, 0, Errorf("%s: weights %s, scales %s do not fit %d bits in groups of %d", op, fmtShape(w.shape), fmtShape(scales.shape), bits, groupSize)
	}
	return numel(w.shape[:nd-1]), cols, nil
}

// Dequantize unpacks Quantize's output: w = scale·q + bias, in the scales' dtype,
// the product and the sum each rounded to it as MLX's dequantize computes them.
// A Dequantizer backend does it on the device; otherwise it is done in Go.
func Dequantize(w, scales, biases *Array, groupSize, bits int) *Array {
	rows, cols, e := quantShape("dequantize", w, scales, biases, groupSize, bits)
	if e != nil {
		return e
	}
	shape := append(clone(w.shape[:len(w.shape)-1]), cols)
	if d, ok := w.b.(Dequantizer); ok {
		h, err := d.Dequantize(w, scales, biases, groupSize, bits, shape)
		keepAlive(w, scales, biases)
		return newArray("dequantize", w.b, h, err, shape, scales.dtype)
	}
	packed, err := w.Uint32s()
	if err != nil {
		return errArray(err)
	}
	s, err := scales.Float32s()
	if err != nil {
		return errArray(err)
	}
	bs, err := biases.Float32s()
	if err != nil {
		return errArray(err)
	}
	vals, err := quant.DequantizeRounded(packed, s, bs, rows, cols, groupSize, bits, rounder(scales.dtype))
	if err != nil {
		return Errorf("dequantize: %v", err)
	}
	return FromData(w.b, scales.dtype, vals, shape...)
}

// QuantizedMatmulA8 is QuantizedMatmul(x, w, scales, biases, true, groupSize, bits)
// with 8-bit activations where that is faster: when x is not traced, w is one
// matrix of 4 or 8 bits, and the backend has integer dot products for it
// (QuantizedMatMulerA8) for one row, where x is one row (a decode step), or for
// many (HasQuantizedA8Rows), x is rounded to int8 with one scale per few values
// (each value moves by at most 1/254 of the largest magnitude in its aligned block:
// of 8 values for one row, of 32 for many, as llama.cpp's Q8_0) and multiplied by
// the packed weights as integers, as llama.cpp multiplies its quantized weights.
// Every row is rounded alone, so a row's result does not depend on the rows beside
// it. Anywhere else it is QuantizedMatmul, exactly.
func QuantizedMatmulA8(x, w, scales, biases *Array, groupSize, bits int) *Array {
	if x == nil || x.err != nil || !a8Runs(x, bits) || traced(x, w, scales, biases) || len(w.shape) != 2 {
		return QuantizedMatmul(x, w, scales, biases, true, groupSize, bits)
	}
	_, k, e := quantShape("quantized_matmul", w, scales, biases, groupSize, bits)
	if e != nil || x.shape[len(x.shape)-1] != k || !x.dtype.IsFloat() {
		return QuantizedMatmul(x, w, scales, biases, true, groupSize, bits) // which says what is wrong
	}
	out := append(clone(x.shape[:len(x.shape)-1]), w.shape[0])
	h, err := x.b.(QuantizedMatMulerA8).QuantizedMatMulA8(x, w, scales, biases, groupSize, bits, out)
	keepAlive(x, w, scales, biases)
	return newArray("quantized_matmul_a8", x.b, h, err, out, x.dtype)
}

// QuantizedMatrix is one quantized W (N, K): packed words, scales and biases, as
// QuantizedMatmul takes them.
type QuantizedMatrix struct{ W, Scales, Biases *Array }

// QuantizedMatmuls is QuantizedMatmul(x, w, scales, biases, true, groupSize, bits)
// for every matrix of ws, all of which read the same x (a layer's query, key and
// value projections, or its gate and up projections), or QuantizedMatmulA8 for each
// where a8 is set. Where nothing is traced, every matrix is 2-D and fits x, they
// share one scales dtype, and the backend multiplies several in one call
// (QuantizedMultiMatMuler), they are one op: x is prepared (or rounded to 8 bits)
// once and the rows of all the matrices are handed to the cores together, so small
// matrices stream as fast as one large one. Each result is the one its own op
// gives. Anywhere else it is one op each, which also says what is wrong.
func QuantizedMatmuls(x *Array, ws []QuantizedMatrix, groupSize, bits int, a8 bool) []*Array {
	ys := make([]*Array, len(ws))
	if q, ok := multiMatMuler(x); ok && fusesMatmuls(x, ws, groupSize, bits) {
		a8 = a8 && a8Runs(x, bits)
		outs := make([][]int, len(ws))
		for i, w := range ws {
			outs[i] = append(clone(x.shape[:len(x.shape)-1]), w.W.shape[0])
		}
		hs, err := q.QuantizedMatMuls(x, ws, groupSize, bits, a8, outs)
		keepAlive(x, ws)
		for i := range ys {
			var h Handle
			if err == nil {
				h = hs[i]
			}
			ys[i] = newArray("quantized_matmuls", x.b, h, err, outs[i], x.dtype)
		}
		return ys
	}
	for i, w := range ws {
		if a8 {
			ys[i] = QuantizedMatmulA8(x, w.W, w.Scales, w.Biases, groupSize, bits)
		} else {
			ys[i] = QuantizedMatmul(x, w.W, w.Scales, w.Biases, true, groupSize, bits)
		}
	}
	return ys
}

// multiMatMuler is x's backend's several-matrix product, if x is valid and it has one.
func multiMatMuler(x *Array) (QuantizedMultiMatMuler, bool) {
	if x == nil || x.err != nil {
		return nil, false
	}
	q, ok := x.b.(QuantizedMultiMatMuler)
	return q, ok
}

// fusesMatmuls reports whether QuantizedMatmuls' inputs suit one backend call: at
// least two matrices, all valid, untraced, 2-D, on x's backend, of x's width and of
// one scales dtype, and x a float array.
func fusesMatmuls(x *Array, ws []QuantizedMatrix, groupSize, bits int) bool {
	if len(ws) < 2 || checkFloat("quantized_matmuls", x) != nil || traced(x) || len(x.shape) < 1 {
		return false
	}
	for _, w := range ws {
		if check("quantized_matmuls", x, w.W, w.Scales, w.Biases) != nil || traced(w.W, w.Scales, w.Biases) || len(w.W.shape) != 2 {
			return false
		}
		if _, k, e := quantShape("quantized_matmuls", w.W, w.Scales, w.Biases, groupSize, bits); e != nil || k != x.shape[len(x.shape)-1] {
			return false
		}
		if w.Scales.dtype != ws[0].Scales.dtype || w.Biases.dtype != ws[0].Biases.dtype {
			return false
		}
	}
	return true
}

// ReadsCompactScales reports whether b's quantized products of bits-bit weights
// read compact 16-bit scales and biases (mx.Compact) as fast as float32 ones or
// faster, so a 16-bit checkpoint's may stay compact. Where it is false, every
// product would widen them first: keep them float32.
func ReadsCompactScales(b Backend, bits int) bool {
	r, ok := b.(CompactScaleReader)
	return ok && r.ReadsCompactScales(bits)
}

// a8Runs reports whether x's backend multiplies x's rows by bits-bit weights on
// integers: one row where it has HasQuantizedA8, more where HasQuantizedA8Rows.
func a8Runs(x *Array, bits int) bool {
	if len(x.shape) < 1 {
		return false
	}
	if oneRow(x) {
		return HasQuantizedA8(x.b, bits)
	}
	return HasQuantizedA8Rows(x.b, bits)
}

// oneRow reports whether x (at least one axis) holds a single row of its last axis:
// a decode step's activations, where a prompt's hold many.
func oneRow(x *Array) bool { return x.Size() == x.shape[len(x.shape)-1] }

// HasQuantizedA8Rows reports whether QuantizedMatmulA8 multiplies many rows of x
// by bits-bit weights on integers on b (a prompt's prefill), not only one.
func HasQuantizedA8Rows(b Backend, bits int) bool {
	q, ok := b.(QuantizedMatMulerA8)
	return ok && q.HasA8Rows(bits)
}

// HasQuantizedA8 reports whether QuantizedMatmulA8 multiplies bits-bit weights
// on integers on b (elsewhere it is the exact product).
func HasQuantizedA8(b Backend, bits int) bool {
	q, ok := b.(QuantizedMatMulerA8)
	return ok && q.HasA8(bits)
}

// QuantizedMatmul computes x @ dequant(w)ᵀ (transpose, the Linear layer: x (..., K),
// w (N, K) packed, out (..., N)) or x @ dequant(w) (x (..., N), out (..., K)) without
// building the dequantized matrix where the backend has a fused kernel. w may also
// carry batch axes, w (..., N, K): then x is (..., M, K) with the same batch axes
// and each batch multiplies its own matrix (a quantized KV cache, one per head), as
// MLX's quantized_matmul does. The gradient flows to x only: quantized weights are
// frozen (QLoRA trains an adapter beside them).
func QuantizedMatmul(x, w, scales, biases *Array, transpose bool, groupSize, bits int) *Array {
	if e := checkFloat("quantized_matmul", x); e != nil {
		return e
	}
	_, k, e := quantShape("quantized_matmul", w, scales, biases, groupSize, bits)
	if e != nil {
		return e
	}
	nd := len(w.shape)
	if nd < 2 {
		return Errorf("quantized_matmul: weights must be 2-d or batched, got %s", fmtShape(w.shape))
	}
	n := w.shape[nd-2]
	if batch := w.shape[:nd-2]; len(batch) > 0 && (len(x.shape) != nd || !sameShape(x.shape[:nd-2], batch)) {
		return Errorf("quantized_matmul: input %s for batched weights %s: the batch axes must match", fmtShape(x.shape), fmtShape(w.shape))
	}
	in, outDim := k, n
	if !transpose {
		in, outDim = n, k
	}
	if len(x.shape) < 1 || x.shape[len(x.shape)-1] != in {
		return Errorf("quantized_matmul: input %s for weights (%d,%d)%s", fmtShape(x.shape), n, k, tmark(transpose))
	}
	if traced(w, scales, biases) {
		return Errorf("quantized_matmul: quantized weights cannot be differentiated")
	}
	out := append(clone(x.shape[:len(x.shape)-1]), outDim)
	var res *Array
	if q, ok := x.b.(QuantizedMatMuler); ok {
		h, err := q.QuantizedMatMul(x, w, scales, biases, transpose, groupSize, bits, out)
		keepAlive(x, w, scales, biases)
		res = newArray("quantized_matmul", x.b, h, err, out, x.dtype)
	} else {
		// Dequantize in float32 whatever the scales' dtype, as MLX's kernels do.
		deq := Dequantize(w, AsType(scales, Float32), AsType(biases, Float32), groupSize, bits)
		x2 := StopGradient(x)
		if nd == 2 {
			x2 = Reshape(x2, -1, in)
		}
		res = Reshape(MatmulT(x2, deq, false, transpose), out...)
		if res.err == nil && res.dtype != x.dtype {
			res = AsType(res, x.dtype)
		}
	}
	return record(res, func(g *Array) []*Array {
		return []*Array{QuantizedMatmul(g, w, scales, biases, !transpose, groupSize, bits), nil, nil, nil}
	}, x, w, scales, biases)
}
