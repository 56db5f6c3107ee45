//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	mx "github.com/inloop/inloop/mlxbridge"
)

// MLX's dtype numbering (the mlx_dtype enum).
const (
	dtBool     C.int = 0
	dtUint8    C.int = 1
	dtUint16   C.int = 2
	dtUint32   C.int = 3
	dtUint64   C.int = 4
	dtInt8     C.int = 5
	dtInt16    C.int = 6
	dtInt32    C.int = 7
	dtInt64    C.int = 8
	dtFloat16  C.int = 9
	dtFloat32  C.int = 10
	dtFloat64  C.int = 11
	dtBFloat16 C.int = 12
)

var toMLX = [...]C.int{
	mx.Float32: dtFloat32, mx.Float16: dtFloat16, mx.BFloat16: dtBFloat16,
	mx.Int32: dtInt32, mx.Uint32: dtUint32, mx.Uint8: dtUint8, mx.Bool: dtBool,
}

func mlxType(dt mx.DType) C.int { return toMLX[dt] }

// fromMLX maps an MLX dtype to ours, and to the one to convert to when we have no
// equivalent (MLX makes int64 or float64 in a few places).
func fromMLX(t C.int) (dt mx.DType, exact bool) {
	switch t {
	case dtBool:
		return mx.Bool, true
	case dtUint8:
		return mx.Uint8, true
	case dtUint32:
		return mx.Uint32, true
	case dtInt32:
		return mx.Int32, true
	case dtFloat16:
		return mx.Float16, true
	case dtFloat32:
		return mx.Float32, true
	case dtBFloat16:
		return mx.BFloat16, true
	case dtUint16, dtUint64:
		return mx.Uint32, false
	case dtInt8, dtInt16, dtInt64:
		return mx.Int32, false
	}
	return mx.Float32, false
}

func itemSize(t C.int) int64 {
	switch t {
	case dtBool, dtUint8, dtInt8:
		return 1
	case dtUint16, dtInt16, dtFloat16, dtBFloat16:
		return 2
	case dtUint64, dtInt64, dtFloat64:
		return 8
	}
	return 4
}

// carray is the mlx backend's Handle: one mlx_array owned by Go. The array is freed
// when the carray becomes unreachable (a cleanup queues it for the worker) or at
// once by Backend.Free.
type carray struct {
	c       C.mlxc_array
	bytes   int64
	cleanup runtime.Cleanup
	freed   bool // set on the worker by Free
	// lo, hi bound the values of an integer array written from Go, so index
	// checks need not read the array back.
	lo, hi int64
	ranged bool
}

var errFreed = errors.New("mlx: array was freed")

// arg returns x's mlx_array. It runs on the worker.
func arg(x *mx.Array) (C.mlxc_array, error) {
	if x == nil {
		return C.mlxc_array{}, errors.New("mlx: nil array")
	}
	h, ok := x.Handle().(*carray)
	if !ok {
		return C.mlxc_array{}, fmt.Errorf("mlx: array from another backend (%T)", x.Handle())
	}
	if h.freed {
		return C.mlxc_array{}, errFreed
	}
	return h.c, nil
}

func ptr[T any](s []T) *T { return unsafe.SliceData(s) }

func cints(v []int) []C.int {
	out := make([]C.int, len(v))
	for i, x := range v {
		out[i] = C.int(x)
	}
	return out
}

// scope collects the intermediate arrays of one backend call, frees them at the
// end, and keeps the first error. It lives on the worker.
type scope struct {
	be  *Backend
	st  C.mlxc_stream
	tmp []C.mlxc_array
	err error
}

// in returns x's array, recording an error for a freed or foreign array.
func (s *scope) in(x *mx.Array) C.mlxc_array {
	c, err := arg(x)
	if err != nil && s.err == nil {
		s.err = err
	}
	return c
}

// op runs one mlx-c call that makes an array and keeps the result for freeing.
func (s *scope) op(name string, f func(r *C.mlxc_array) C.int) C.mlxc_array {
	if s.err != nil {
		return C.mlxc_array{}
	}
	var r C.mlxc_array
	if f(&r) != 0 {
		s.err = lastError(name)
		if r.ctx != nil {
			C.mlxc_array_free(r)
		}
		return C.mlxc_array{}
	}
	s.tmp = append(s.tmp, r)
	return r
}

// fail records an error unless one is already kept.
func (s *scope) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// astype converts a unless it already has MLX dtype t.
func (s *scope) astype(a C.mlxc_array, t C.int) C.mlxc_array {
	if s.err != nil || C.mlxc_array_dtype(a) == t {
		return a
	}
	return s.op("astype", func(r *C.mlxc_array) C.int { return C.mlxc_astype(r, a, t, s.st) })
}

// scalar makes a 0-d array of v with MLX dtype t.
func (s *scope) scalar(v float32, t C.int) C.mlxc_array {
	if s.err != nil {
		return C.mlxc_array{}
	}
	a := C.mlxc_array_new_data(unsafe.Pointer(&v), nil, 0, dtFloat32)
	if a.ctx == nil {
		s.fail(lastError("scalar"))
		return a
	}
	s.tmp = append(s.tmp, a)
	return s.astype(a, t)
}

func (s *scope) reshape(a C.mlxc_array, shape []int) C.mlxc_array {
	cs := cints(shape)
	return s.op("reshape", func(r *C.mlxc_array) C.int {
		return C.mlxc_reshape(r, a, ptr(cs), C.size_t(len(cs)), s.st)
	})
}

func (s *scope) transpose(a C.mlxc_array, perm []int) C.mlxc_array {
	cs := cints(perm)
	return s.op("transpose", func(r *C.mlxc_array) C.int {
		return C.mlxc_transpose_axes(r, a, ptr(cs), C.size_t(len(cs)), s.st)
	})
}

func (s *scope) binary(name string, a, b C.mlxc_array) C.mlxc_array {
	return s.op(name, func(r *C.mlxc_array) C.int { return binaryCall(name, r, a, b, s.st) })
}

// shapeOf reads an array's shape.
func shapeOf(a C.mlxc_array) []int {
	n := int(C.mlxc_array_ndim(a))
	if n == 0 {
		return []int{}
	}
	cs := unsafe.Slice(C.mlxc_array_shape(a), n)
	out := make([]int, n)
	for i, d := range cs {
		out[i] = int(d)
	}
	return out
}

// exec runs f on the worker inside a scope and returns its result as a new handle.
func (be *Backend) exec(name string, f func(s *scope) C.mlxc_array) (mx.Handle, error) {
	var h *carray
	var err error
	be.w.do(func() {
		be.drain()
		s := &scope{be: be, st: be.stream}
		r := f(s)
		if s.err == nil && r.ctx == nil {
			s.err = fmt.Errorf("mlx: %s: no result", name)
		}
		for _, t := range s.tmp {
			if s.err != nil || t.ctx != r.ctx {
				C.mlxc_array_free(t)
			}
		}
		if s.err != nil {
			err = s.err
			return
		}
		kept := false
		for _, t := range s.tmp {
			kept = kept || t.ctx == r.ctx
		}
		if !kept { // f returned one of its inputs: take a new reference
			in := r
			if r = s.op("copy", func(out *C.mlxc_array) C.int { return C.mlxc_array_set(out, in) }); s.err != nil {
				err = s.err
				return
			}
		}
		h = be.own(r)
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// own wraps an mlx_array the caller has a reference to, and arranges its release.
func (be *Backend) own(c C.mlxc_array) *carray {
	bytes := int64(C.mlxc_array_size(c)) * itemSize(C.mlxc_array_dtype(c))
	h := &carray{c: c, bytes: bytes}
	h.cleanup = runtime.AddCleanup(h, be.release, released{c, bytes})
	be.track(bytes)
	return h
}

// adopt wraps an array MLX made and we hold a reference to, converting a dtype we
// have no equivalent for. It runs on the worker.
func (be *Backend) adopt(c C.mlxc_array) (*mx.Array, error) {
	dt, exact := fromMLX(C.mlxc_array_dtype(c))
	if !exact {
		var r C.mlxc_array
		rc := C.mlxc_astype(&r, c, mlxType(dt), be.stream)
		C.mlxc_array_free(c)
		if rc != 0 {
			return nil, lastError("astype")
		}
		c = r
	}
	return mx.Wrap(be, be.own(c), shapeOf(c), dt), nil
}

func (be *Backend) FromData(dt mx.DType, shape []int, data any) (mx.Handle, error) {
	var src unsafe.Pointer
	t := mlxType(dt)
	var lo, hi int64
	ranged := false
	switch d := data.(type) {
	case []float32:
		src, t = unsafe.Pointer(ptr(d)), dtFloat32
	case []int32:
		src, ranged = unsafe.Pointer(ptr(d)), true
		lo, hi = minMax(d)
	case []uint32:
		src, ranged = unsafe.Pointer(ptr(d)), true
		lo, hi = minMax(d)
	case []uint8:
		if dt == mx.Bool { // MLX's bool is one byte holding 0 or 1
			b := make([]uint8, len(d))
			for i, v := range d {
				if v != 0 {
					b[i] = 1
				}
			}
			d = b
		}
		src = unsafe.Pointer(ptr(d))
	default:
		return nil, fmt.Errorf("mlx: unsupported data %T", data)
	}
	cs := cints(shape)
	h, err := be.exec("from data", func(s *scope) C.mlxc_array {
		a := C.mlxc_array_new_data(src, ptr(cs), C.int(len(cs)), t)
		if a.ctx == nil {
			s.fail(lastError("from data"))
			return a
		}
		s.tmp = append(s.tmp, a)
		// Float16/BFloat16 arrive as float32 values already rounded: the cast is exact.
		return s.astype(a, mlxType(dt))
	})
	runtime.KeepAlive(data)
	if err != nil {
		return nil, err
	}
	if ranged {
		c := h.(*carray)
		c.lo, c.hi, c.ranged = lo, hi, true
	}
	return h, nil
}

func minMax[T int32 | uint32](v []T) (lo, hi int64) {
	if len(v) == 0 {
		return 0, -1
	}
	lo, hi = int64(v[0]), int64(v[0])
	for _, x := range v[1:] {
		lo, hi = min(lo, int64(x)), max(hi, int64(x))
	}
	return lo, hi
}

// Data evaluates a and copies it out, floats as float32.
func (be *Backend) Data(a *mx.Array) (any, error) {
	var out any
	var err error
	be.w.wait(func() {
		be.drain()
		s := &scope{be: be, st: be.stream}
		defer func() {
			for _, t := range s.tmp {
				C.mlxc_array_free(t)
			}
		}()
		x := s.in(a)
		if a.DType().IsFloat() {
			x = s.astype(x, dtFloat32)
		}
		x = s.op("contiguous", func(r *C.mlxc_array) C.int { return C.mlxc_contiguous(r, x, false, s.st) })
		if s.err == nil && C.mlxc_array_eval(x) != 0 {
			s.fail(lastError("eval"))
		}
		if s.err != nil {
			err = s.err
			return
		}
		n := int(C.mlxc_array_size(x))
		// Our Go types share MLX's layouts (bool is one byte holding 0 or 1).
		switch a.DType() {
		case mx.Int32:
			out = copyOut[int32](unsafe.Pointer(C.mlxc_array_data_int32(x)), n)
		case mx.Uint32:
			out = copyOut[uint32](unsafe.Pointer(C.mlxc_array_data_uint32(x)), n)
		case mx.Uint8:
			out = copyOut[uint8](unsafe.Pointer(C.mlxc_array_data_uint8(x)), n)
		case mx.Bool:
			out = copyOut[uint8](unsafe.Pointer(C.mlxc_array_data_bool(x)), n)
		default:
			out = copyOut[float32](unsafe.Pointer(C.mlxc_array_data_float32(x)), n)
		}
		if out == nil {
			err = lastError("data")
		}
	})
	return out, err
}

// copyOut copies n elements from MLX's buffer, or returns nil for a NULL buffer.
func copyOut[T any](p unsafe.Pointer, n int) any {
	out := make([]T, n)
	if n == 0 {
		return out
	}
	if p == nil {
		return nil
	}
	copy(out, unsafe.Slice((*T)(p), n))
	return out
}
