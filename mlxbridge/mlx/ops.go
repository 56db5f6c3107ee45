//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

func binaryCall(name string, r *C.mlxc_array, a, b C.mlxc_array, s C.mlxc_stream) C.int {
	switch name {
	case "add":
		return C.mlxc_add(r, a, b, s)
	case "subtract":
		return C.mlxc_subtract(r, a, b, s)
	case "multiply":
		return C.mlxc_multiply(r, a, b, s)
	case "divide":
		return C.mlxc_divide(r, a, b, s)
	case "maximum":
		return C.mlxc_maximum(r, a, b, s)
	case "minimum":
		return C.mlxc_minimum(r, a, b, s)
	case "power":
		return C.mlxc_power(r, a, b, s)
	case "greater":
		return C.mlxc_greater(r, a, b, s)
	case "greater_equal":
		return C.mlxc_greater_equal(r, a, b, s)
	case "less":
		return C.mlxc_less(r, a, b, s)
	case "equal":
		return C.mlxc_equal(r, a, b, s)
	case "not_equal":
		return C.mlxc_not_equal(r, a, b, s)
	case "matmul":
		return C.mlxc_matmul(r, a, b, s)
	}
	panic("mlx: unknown binary op " + name)
}

var binaryOps = map[mx.BinaryOp]string{
	mx.OpAdd: "add", mx.OpSub: "subtract", mx.OpMul: "multiply", mx.OpDiv: "divide",
	mx.OpMaximum: "maximum", mx.OpMinimum: "minimum", mx.OpPower: "power", mx.OpGreater: "greater",
	mx.OpGreaterEqual: "greater_equal", mx.OpLess: "less", mx.OpEqual: "equal",
}

// nativeUnary lists the unary ops MLX has as ops of its own.
var nativeUnary = map[mx.UnaryOp]bool{
	mx.OpNeg: true, mx.OpExp: true, mx.OpLog: true, mx.OpSqrt: true, mx.OpRsqrt: true,
	mx.OpSigmoid: true, mx.OpTanh: true, mx.OpAbs: true, mx.OpSquare: true, mx.OpSign: true,
}

func unaryCall(op mx.UnaryOp, r *C.mlxc_array, a C.mlxc_array, s C.mlxc_stream) C.int {
	switch op {
	case mx.OpNeg:
		return C.mlxc_negative(r, a, s)
	case mx.OpExp:
		return C.mlxc_exp(r, a, s)
	case mx.OpLog:
		return C.mlxc_log(r, a, s)
	case mx.OpSqrt:
		return C.mlxc_sqrt(r, a, s)
	case mx.OpRsqrt:
		return C.mlxc_rsqrt(r, a, s)
	case mx.OpSigmoid:
		return C.mlxc_sigmoid(r, a, s)
	case mx.OpTanh:
		return C.mlxc_tanh(r, a, s)
	case mx.OpAbs:
		return C.mlxc_abs(r, a, s)
	case mx.OpSquare:
		return C.mlxc_square(r, a, s)
	case mx.OpSign:
		return C.mlxc_sign(r, a, s)
	}
	panic(fmt.Sprintf("mlx: unary op %d is not native", op))
}

// un applies one of MLX's own unary ops.
func (s *scope) un(name string, op mx.UnaryOp, a C.mlxc_array) C.mlxc_array {
	return s.op(name, func(r *C.mlxc_array) C.int {
		return unaryCall(op, r, a, s.st)
	})
}

func (s *scope) erf(a C.mlxc_array) C.mlxc_array {
	return s.op("erf", func(r *C.mlxc_array) C.int { return C.mlxc_erf(r, a, s.st) })
}

const sqrt2overPi = 0.7978845608028654

func (be *Backend) Unary(op mx.UnaryOp, x *mx.Array) (mx.Handle, error) {
	return be.exec("unary", func(s *scope) C.mlxc_array {
		a := s.in(x)
		if nativeUnary[op] {
			return s.un("unary", op, a)
		}
		if op == mx.OpSilu {
			// x·σ(x) in x's own dtype, as mlx.nn.silu (and mlx-lm's swiglu) computes
			// it: a bfloat16 model's SiLU rounds where mlx-lm's does.
			return s.binary("multiply", a, s.un("sigmoid", mx.OpSigmoid, a))
		}
		// The other activations MLX composes in Python, and the derivatives our own
		// autodiff needs: the same formulas, in float32 like the cpu backend, then
		// back to x's dtype.
		t := C.mlxc_array_dtype(a)
		a = s.astype(a, dtFloat32)
		k := func(v float32) C.mlxc_array { return s.scalar(v, dtFloat32) }
		mul := func(p, q C.mlxc_array) C.mlxc_array { return s.binary("multiply", p, q) }
		add := func(p, q C.mlxc_array) C.mlxc_array { return s.binary("add", p, q) }
		sub := func(p, q C.mlxc_array) C.mlxc_array { return s.binary("subtract", p, q) }
		var y C.mlxc_array
		switch op {
		case mx.OpSiluGrad: // σ(x)·(1 + x·(1−σ(x)))
			sg := s.un("sigmoid", mx.OpSigmoid, a)
			y = mul(sg, add(k(1), mul(a, sub(k(1), sg))))
		case mx.OpGelu: // x·Φ(x) = x·(1+erf(x/√2))/2
			y = mul(mul(a, k(0.5)), add(k(1), s.erf(mul(a, k(1/math.Sqrt2)))))
		case mx.OpGeluGrad: // Φ(x) + x·φ(x)
			phi := mul(k(0.5), add(k(1), s.erf(mul(a, k(1/math.Sqrt2)))))
			dens := mul(s.un("exp", mx.OpExp, mul(s.un("square", mx.OpSquare, a), k(-0.5))), k(float32(1/math.Sqrt(2*math.Pi))))
			y = add(phi, mul(a, dens))
		case mx.OpGeluApprox, mx.OpGeluApproxGrad:
			x2 := s.un("square", mx.OpSquare, a)
			inner := mul(k(sqrt2overPi), add(a, mul(k(0.044715), mul(x2, a))))
			th := s.un("tanh", mx.OpTanh, inner)
			if op == mx.OpGeluApprox { // x·(1+tanh(√(2/π)(x+0.044715x³)))/2
				y = mul(mul(a, k(0.5)), add(k(1), th))
			} else { // (1+t)/2 + x·(1−t²)·√(2/π)·(1+3·0.044715x²)/2
				left := mul(k(0.5), add(k(1), th))
				dt := mul(k(sqrt2overPi), add(k(1), mul(k(3*0.044715), x2)))
				right := mul(mul(k(0.5), a), mul(sub(k(1), s.un("square", mx.OpSquare, th)), dt))
				y = add(left, right)
			}
		default:
			s.fail(fmt.Errorf("mlx: unary op %d not supported", op))
			return C.mlxc_array{}
		}
		return s.astype(y, t)
	})
}

func (be *Backend) Binary(op mx.BinaryOp, a, b *mx.Array, out []int, dt mx.DType) (mx.Handle, error) {
	name, ok := binaryOps[op]
	if !ok {
		return nil, fmt.Errorf("mlx: binary op %d not supported", op)
	}
	return be.exec(name, func(s *scope) C.mlxc_array {
		return s.astype(s.binary(name, s.in(a), s.in(b)), mlxType(dt))
	})
}

func (be *Backend) Reduce(op mx.ReduceOp, x *mx.Array, axes []int) (mx.Handle, error) {
	ax := cints(axes)
	return be.exec("reduce", func(s *scope) C.mlxc_array {
		a := s.in(x)
		t := C.mlxc_array_dtype(a)
		if op == mx.ReduceSum && t != dtFloat32 {
			// Sum half-precision values in float32, like the cpu backend (MLX's
			// CPU kernels would accumulate in the half type itself).
			a = s.astype(a, dtFloat32)
		}
		y := s.op("reduce", func(r *C.mlxc_array) C.int {
			switch op {
			case mx.ReduceMax:
				return C.mlxc_max_axes(r, a, ptr(ax), C.size_t(len(ax)), true, s.st)
			case mx.ReduceMin:
				return C.mlxc_min_axes(r, a, ptr(ax), C.size_t(len(ax)), true, s.st)
			}
			return C.mlxc_sum_axes(r, a, ptr(ax), C.size_t(len(ax)), true, s.st)
		})
		return s.astype(y, t)
	})
}

func (be *Backend) ArgMax(x *mx.Array, axis int) (mx.Handle, error) {
	return be.exec("argmax", func(s *scope) C.mlxc_array {
		a := s.in(x)
		i := s.op("argmax", func(r *C.mlxc_array) C.int { return C.mlxc_argmax_axis(r, a, C.int(axis), true, s.st) })
		return s.astype(i, dtInt32) // MLX gives uint32
	})
}

func (be *Backend) Sort(x *mx.Array) (mx.Handle, error) {
	return be.exec("sort", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("sort", func(r *C.mlxc_array) C.int { return C.mlxc_sort_axis(r, a, -1, s.st) })
	})
}

func (be *Backend) CumSum(x *mx.Array, reverse bool) (mx.Handle, error) {
	return be.exec("cumsum", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("cumsum", func(r *C.mlxc_array) C.int { return C.mlxc_cumsum(r, a, -1, C.bool(reverse), true, s.st) })
	})
}

func (be *Backend) MatMul(a, b *mx.Array, transA, transB bool, out []int) (mx.Handle, error) {
	return be.exec("matmul", func(s *scope) C.mlxc_array {
		x, y := s.in(a), s.in(b)
		if transA {
			x = s.swapLast(x)
		}
		if transB {
			y = s.swapLast(y)
		}
		return s.binary("matmul", x, y)
	})
}

func (s *scope) swapLast(a C.mlxc_array) C.mlxc_array {
	return s.op("swapaxes", func(r *C.mlxc_array) C.int { return C.mlxc_swapaxes(r, a, -1, -2, s.st) })
}

func (be *Backend) Reshape(x *mx.Array, shape []int) (mx.Handle, error) {
	return be.exec("reshape", func(s *scope) C.mlxc_array { return s.reshape(s.in(x), shape) })
}

func (be *Backend) Transpose(x *mx.Array, perm []int) (mx.Handle, error) {
	return be.exec("transpose", func(s *scope) C.mlxc_array { return s.transpose(s.in(x), perm) })
}

func (be *Backend) Broadcast(x *mx.Array, shape []int) (mx.Handle, error) {
	return be.exec("broadcast", func(s *scope) C.mlxc_array { return s.broadcast(s.in(x), shape) })
}

func (s *scope) broadcast(a C.mlxc_array, shape []int) C.mlxc_array {
	cs := cints(shape)
	return s.op("broadcast", func(r *C.mlxc_array) C.int {
		return C.mlxc_broadcast_to(r, a, ptr(cs), C.size_t(len(cs)), s.st)
	})
}

// window returns the stop indices of a strided window of size n at start.
func window(start, step, size []int) []C.int {
	stop := make([]C.int, len(start))
	for i := range start {
		stop[i] = C.int(start[i])
		if size[i] > 0 {
			stop[i] = C.int(start[i] + (size[i]-1)*step[i] + 1)
		}
	}
	return stop
}

func (be *Backend) Slice(x *mx.Array, start, step, out []int) (mx.Handle, error) {
	st, sp, stop := cints(start), cints(step), window(start, step, out)
	n := C.size_t(len(st))
	return be.exec("slice", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("slice", func(r *C.mlxc_array) C.int {
			return C.mlxc_slice(r, a, ptr(st), n, ptr(stop), n, ptr(sp), n, s.st)
		})
	})
}

func (be *Backend) SliceUpdate(dst, src *mx.Array, start, step []int) (mx.Handle, error) {
	st, sp, stop := cints(start), cints(step), window(start, step, src.Shape())
	n := C.size_t(len(st))
	return be.exec("slice_update", func(s *scope) C.mlxc_array {
		d, u := s.in(dst), s.in(src)
		return s.op("slice_update", func(r *C.mlxc_array) C.int {
			return C.mlxc_slice_update(r, d, u, ptr(st), n, ptr(stop), n, ptr(sp), n, s.st)
		})
	})
}

func (be *Backend) Concatenate(xs []*mx.Array, axis int, out []int) (mx.Handle, error) {
	return be.exec("concatenate", func(s *scope) C.mlxc_array {
		cs := make([]C.mlxc_array, len(xs))
		for i, x := range xs {
			cs[i] = s.in(x)
		}
		if s.err != nil {
			return C.mlxc_array{}
		}
		v := C.mlxc_vector_array_new_data(ptr(cs), C.size_t(len(cs)))
		defer C.mlxc_vector_array_free(v)
		return s.op("concatenate", func(r *C.mlxc_array) C.int { return C.mlxc_concatenate_axis(r, v, C.int(axis), s.st) })
	})
}

func (be *Backend) Where(cond, a, b *mx.Array, out []int, dt mx.DType) (mx.Handle, error) {
	return be.exec("where", func(s *scope) C.mlxc_array {
		c, x, y := s.in(cond), s.in(a), s.in(b)
		if cond.DType() != mx.Bool { // nonzero picks a
			c = s.binary("not_equal", c, s.scalar(0, mlxType(cond.DType())))
		}
		w := s.op("where", func(r *C.mlxc_array) C.int { return C.mlxc_where(r, c, x, y, s.st) })
		return s.astype(w, mlxType(dt))
	})
}

func (be *Backend) AsType(x *mx.Array, dt mx.DType) (mx.Handle, error) {
	return be.exec("astype", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("astype", func(r *C.mlxc_array) C.int { return C.mlxc_astype(r, a, mlxType(dt), s.st) })
	})
}

// StopGradient cuts x out of MLX's autodiff graph (mlx_stop_gradient). The
// backend's ValueAndGrad needs it: mlxbridge's own StopGradient only cuts its tape.
func (be *Backend) StopGradient(x *mx.Array) (mx.Handle, error) {
	return be.exec("stop_gradient", func(s *scope) C.mlxc_array {
		a := s.in(x)
		return s.op("stop_gradient", func(r *C.mlxc_array) C.int { return C.mlxc_stop_gradient(r, a, s.st) })
	})
}
