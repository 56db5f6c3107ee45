//go:build cgo && (darwin || linux)

package mlx

/*
#include <stdlib.h>
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Fused kernels: MLX's own softmax, logsumexp, fast.rms_norm, fast.rope,
// fast.scaled_dot_product_attention and quantized_matmul.

func (be *Backend) Softmax(x *mx.Array) (mx.Handle, error) {
	return be.exec("softmax", func(s *scope) C.mlxc_array {
		a := s.in(x)
		// precise: accumulate in float32 for half inputs, as the cpu backend does.
		return s.op("softmax", func(r *C.mlxc_array) C.int { return C.mlxc_softmax_axis(r, a, -1, true, s.st) })
	})
}

func (be *Backend) LogSumExp(x *mx.Array) (mx.Handle, error) {
	return be.exec("logsumexp", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("logsumexp", func(r *C.mlxc_array) C.int { return C.mlxc_logsumexp_axis(r, a, -1, true, s.st) })
	})
}

func (be *Backend) RMSNorm(x, w *mx.Array, eps float32) (mx.Handle, error) {
	dt := x.DType()
	if w.DType() != dt {
		dt = mx.Float32
	}
	return be.exec("rms_norm", func(s *scope) C.mlxc_array {
		a, g := s.in(x), s.in(w)
		y := s.op("rms_norm", func(r *C.mlxc_array) C.int { return C.mlxc_fast_rms_norm(r, a, g, C.float(eps), s.st) })
		return s.astype(y, mlxType(dt))
	})
}

// RoPE uses fast.rope, which wants at least three axes and rotates along axis -2
// as we do, or on the CPU device the same rotation from a table of its angles
// (rope.go). The inverse rotation (for gradients) turns by the negative angle:
// MLX's positions are multiplied by scale, so a negated scale does exactly that.
func (be *Backend) RoPE(x *mx.Array, o mx.RoPEOptions) (mx.Handle, error) {
	shape := x.Shape()
	scale := o.Scale
	if o.Inverse {
		scale = -scale
	}
	return be.exec("rope", func(s *scope) C.mlxc_array {
		a := s.in(x)
		if be.ropeByTable(shape, o) && s.err == nil {
			return be.ropeRows(s, a, shape, ropeKey{o.Dims, o.Base, scale, C.mlxc_array_dtype(a)}, o.Offset)
		}
		if len(shape) < 3 {
			a = s.reshape(a, append([]int{1, 1, 1}[:3-len(shape)], shape...))
		}
		base := C.mlxc_opt_float{value: C.float(o.Base), has_value: true}
		var freqs C.mlxc_array
		if o.Freqs != nil {
			base, freqs = C.mlxc_opt_float{}, s.in(o.Freqs)
		}
		y := s.op("rope", func(r *C.mlxc_array) C.int {
			return C.mlxc_fast_rope(r, a, C.int(o.Dims), C.bool(o.Traditional), base, C.float(scale), C.int(o.Offset), freqs, s.st)
		})
		if len(shape) < 3 {
			y = s.reshape(y, shape)
		}
		return y
	})
}

// SDPA uses fast.scaled_dot_product_attention. Its causal mode masks key j for
// query i when j > i + S − L, like ours; a causal mask together with an explicit
// one is folded into one array mask here, since MLX takes one or the other. One
// query (a decode step) sees every key, so it is asked for without a mask, as
// mlx-lm asks: on the CPU device the causal mode's fallback would build and apply
// a mask of all keys (two aranges, a comparison and a where a layer, every token).
func (be *Backend) SDPA(q, k, v *mx.Array, scale float32, causal bool, mask *mx.Array) (mx.Handle, error) {
	l, sl := q.Dim(2), k.Dim(2)
	if l == 1 {
		causal = false
	}
	return be.exec("sdpa", func(s *scope) C.mlxc_array {
		qa, ka, va := s.in(q), s.in(k), s.in(v)
		t := C.mlxc_array_dtype(qa)
		mode := "causal"
		var m C.mlxc_array
		if mask != nil {
			mode = "array"
			m = s.in(mask)
			if mask.DType() != mx.Bool {
				m = s.astype(m, t) // MLX wants the mask in the output's dtype
			}
			if causal {
				keep := s.causalKeep(l, sl)
				if mask.DType() == mx.Bool {
					m = s.op("where", func(r *C.mlxc_array) C.int { return C.mlxc_where(r, keep, m, keep, s.st) })
				} else {
					negInf := s.scalar(float32(math.Inf(-1)), t)
					m = s.op("where", func(r *C.mlxc_array) C.int { return C.mlxc_where(r, keep, m, negInf, s.st) })
				}
			}
		} else if !causal {
			mode = ""
		}
		if s.err != nil {
			return C.mlxc_array{}
		}
		cmode := C.CString(mode)
		defer C.free(unsafe.Pointer(cmode))
		return s.op("sdpa", func(r *C.mlxc_array) C.int {
			return C.mlxc_fast_scaled_dot_product_attention(r, qa, ka, va, C.float(scale), cmode, m, C.mlxc_array{}, s.st)
		})
	})
}

// causalKeep is the (L, S) Bool mask of the keys each query may see.
func (s *scope) causalKeep(l, sl int) C.mlxc_array {
	keep := make([]uint8, l*sl)
	for i := 0; i < l; i++ {
		for j := 0; j <= i+sl-l && j < sl; j++ {
			keep[i*sl+j] = 1
		}
	}
	shape := []C.int{C.int(l), C.int(sl)}
	a := C.mlxc_array_new_data(unsafe.Pointer(ptr(keep)), ptr(shape), 2, dtBool)
	if a.ctx == nil {
		s.fail(lastError("causal mask"))
		return a
	}
	s.tmp = append(s.tmp, a)
	return a
}

var affine = C.CString("affine") // lives as long as the process

func optInt(v int) C.mlxc_opt_int { return C.mlxc_opt_int{value: C.int(v), has_value: true} }

// QuantizedMatMul is MLX's quantized_matmul in affine mode. MLX computes in the
// promoted dtype of x and the scales; the result is cast back to x's dtype.
func (be *Backend) QuantizedMatMul(x, w, scales, biases *mx.Array, transpose bool, groupSize, bits int, out []int) (mx.Handle, error) {
	return be.exec("quantized_matmul", func(s *scope) C.mlxc_array {
		xa, wa, sa, ba := s.in(x), s.in(w), s.in(scales), s.in(biases)
		y := s.op("quantized_matmul", func(r *C.mlxc_array) C.int {
			return C.mlxc_quantized_matmul(r, xa, wa, sa, ba, C.bool(transpose), optInt(groupSize), optInt(bits), affine, s.st)
		})
		return s.astype(y, mlxType(x.DType()))
	})
}

// Dequantize is MLX's own mx.dequantize in affine mode, in the scales' dtype: a
// quantized embedding's table stays on the device, and its rows come out as
// mlx-lm's QuantizedEmbedding computes them.
func (be *Backend) Dequantize(w, scales, biases *mx.Array, groupSize, bits int, out []int) (mx.Handle, error) {
	return be.exec("dequantize", func(s *scope) C.mlxc_array {
		wa, sa, ba := s.in(w), s.in(scales), s.in(biases)
		return s.op("dequantize", func(r *C.mlxc_array) C.int {
			return C.mlxc_dequantize(r, wa, sa, ba, optInt(groupSize), optInt(bits), affine, C.mlxc_array{}, C.mlxc_opt_dtype{}, s.st)
		})
	})
}

// quantize is MLX's own mx.quantize in affine mode: packed words, scales, biases.
// mlxbridge.Quantize packs in Go; this is what tests hold it against.
func (be *Backend) quantize(w *mx.Array, groupSize, bits int) (wq, scales, biases *mx.Array, err error) {
	var out [3]*mx.Array
	be.w.do(func() {
		be.drain()
		a, aerr := arg(w)
		if aerr != nil {
			err = aerr
			return
		}
		var res C.mlxc_vector
		if C.mlxc_quantize(&res, a, optInt(groupSize), optInt(bits), affine, C.mlxc_array{}, be.stream) != 0 {
			err = lastError("quantize")
			return
		}
		defer C.mlxc_vector_array_free(res)
		if n := C.mlxc_vector_array_size(res); n != 3 {
			err = fmt.Errorf("mlx: quantize returned %d arrays, want 3", n)
			return
		}
		for i := range out {
			var c C.mlxc_array
			if C.mlxc_vector_array_get(&c, res, C.size_t(i)) != 0 {
				err = lastError("quantize")
				return
			}
			if out[i], err = be.adopt(c); err != nil {
				return
			}
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return out[0], out[1], out[2], nil
}
