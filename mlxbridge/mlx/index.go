//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
)

// checkIndices reports an index outside [0, n). MLX does not check gather and
// scatter indices (an out-of-range one reads or writes outside the buffer), so we
// do: from the range recorded when Go wrote the indices, else by reading them
// back once and remembering the range.
func (be *Backend) checkIndices(idx *mx.Array, n int) error {
	h, ok := idx.Handle().(*carray)
	if !ok {
		_, err := arg(idx)
		return err
	}
	var err error
	be.w.do(func() {
		if !h.ranged {
			var d any
			if d, err = be.Data(idx); err != nil {
				return
			}
			switch v := d.(type) {
			case []int32:
				h.lo, h.hi = minMax(v)
			case []uint32:
				h.lo, h.hi = minMax(v)
			default:
				err = fmt.Errorf("mlx: indices must be int32 or uint32, got %s", idx.DType())
				return
			}
			h.ranged = true
		}
		if h.hi < h.lo { // no indices
			return
		}
		if h.lo < 0 {
			err = fmt.Errorf("mlx: index %d out of range for axis of size %d", h.lo, n)
		} else if h.hi >= int64(n) {
			err = fmt.Errorf("mlx: index %d out of range for axis of size %d", h.hi, n)
		}
	})
	return err
}

func (be *Backend) Take(x, idx *mx.Array, axis int) (mx.Handle, error) {
	if err := be.checkIndices(idx, x.Dim(axis)); err != nil {
		return nil, err
	}
	return be.exec("take", func(s *scope) C.mlxc_array {
		a, i := s.in(x), s.in(idx)
		return s.op("take", func(r *C.mlxc_array) C.int { return C.mlxc_take_axis(r, a, i, C.int(axis), s.st) })
	})
}

func (be *Backend) TakeAlongAxis(x, idx *mx.Array, axis int, out []int) (mx.Handle, error) {
	if err := be.checkIndices(idx, x.Dim(axis)); err != nil {
		return nil, err
	}
	return be.exec("take_along_axis", func(s *scope) C.mlxc_array {
		a, i := s.in(x), s.in(idx)
		return s.op("take_along_axis", func(r *C.mlxc_array) C.int {
			return C.mlxc_take_along_axis(r, a, i, C.int(axis), s.st)
		})
	})
}

// ScatterAdd adds upd (pre..., idx..., post...) into zeros(shape) at idx along
// axis. MLX's scatter wants the indexed axis first, so the update is flattened to
// (n, 1, pre..., post...), scattered into (N, pre..., post...), and moved back.
func (be *Backend) ScatterAdd(upd, idx *mx.Array, axis int, shape []int) (mx.Handle, error) {
	if err := be.checkIndices(idx, shape[axis]); err != nil {
		return nil, err
	}
	pre, post := shape[:axis], shape[axis+1:]
	n := idx.Size()
	front := func(lead ...int) []int { return append(append(lead, pre...), post...) }
	toFront := make([]int, len(shape)) // (pre, n, post) -> (n, pre, post)
	back := make([]int, len(shape))    // (N, pre, post) -> (pre, N, post)
	toFront[0] = axis
	for i := range pre {
		toFront[i+1] = i
		back[i] = i + 1
	}
	back[axis] = 0
	for i := axis + 1; i < len(shape); i++ {
		toFront[i] = i
		back[i] = i
	}
	zshape := cints(front(shape[axis]))
	return be.exec("scatter_add", func(s *scope) C.mlxc_array {
		u := s.reshape(s.in(upd), append(append(append([]int{}, pre...), n), post...))
		u = s.reshape(s.transpose(u, toFront), front(n, 1))
		i := s.reshape(s.in(idx), []int{n})
		z := s.op("zeros", func(r *C.mlxc_array) C.int {
			return C.mlxc_zeros(r, ptr(zshape), C.size_t(len(zshape)), mlxType(upd.DType()), s.st)
		})
		if s.err != nil {
			return C.mlxc_array{}
		}
		iv := C.mlxc_vector_array_new_data(&i, 1)
		defer C.mlxc_vector_array_free(iv)
		zero := C.int(0)
		sum := s.op("scatter_add", func(r *C.mlxc_array) C.int {
			return C.mlxc_scatter_add(r, z, iv, u, &zero, 1, s.st)
		})
		return s.transpose(sum, back)
	})
}

func (be *Backend) ScatterAddAlongAxis(upd, idx *mx.Array, axis int, shape []int) (mx.Handle, error) {
	if err := be.checkIndices(idx, shape[axis]); err != nil {
		return nil, err
	}
	zshape := cints(shape)
	return be.exec("scatter_add_axis", func(s *scope) C.mlxc_array {
		u := s.in(upd)
		i := s.broadcast(s.in(idx), upd.Shape())
		z := s.op("zeros", func(r *C.mlxc_array) C.int {
			return C.mlxc_zeros(r, ptr(zshape), C.size_t(len(zshape)), mlxType(upd.DType()), s.st)
		})
		return s.op("scatter_add_axis", func(r *C.mlxc_array) C.int {
			return C.mlxc_scatter_add_axis(r, z, i, u, C.int(axis), s.st)
		})
	})
}
