//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	mx "github.com/inloop/inloop/mlxbridge"
)

// RoPE on the CPU device. MLX has no CPU kernel for fast.rope: each call builds its
// fallback graph, which computes the positions, the inverse frequencies, their
// products, cosines and sines again before it rotates (about 20 nodes a call, 8
// calls a decode step of a 4-layer model: a sixth of the step's nodes, each
// scheduled and computed on every token). The angles depend only on the position,
// so the backend keeps a table of them per setting and a call rotates with rows of
// it: the fallback's own last five ops. The table is computed by MLX with the
// fallback's ops in the fallback's order, so its rows are the fallback's bits and
// the rotation is too (TestMlxLMLogitsMLX holds to mlx-lm's logits exactly). On a
// GPU fast.rope is one fused kernel and is used as it is.

// ropeKey is one table's setting: the rotated dims, base and scale (negated for the
// inverse rotation), and the activations' dtype the cosines and sines are cast to.
type ropeKey struct {
	dims        int
	base, scale float32
	dtype       C.int
}

// ropeTable holds cos and sin of the angles of positions [0, n), (n, dims/2).
type ropeTable struct {
	cos, sin C.mlxc_array
	n        int
}

// ropeTableMin is the fewest positions a table is made for; it doubles as
// positions past its end are asked for.
const ropeTableMin = 1024

// ropeByTable reports whether RoPE of x with o runs from a table: on the CPU
// device, for the rotation Llama and Qwen use (not the traditional interleaved one,
// no custom frequencies) over whole heads of a (B, H, L, D) array.
func (be *Backend) ropeByTable(shape []int, o mx.RoPEOptions) bool {
	return !be.gpu && !o.Traditional && o.Freqs == nil && len(shape) == 4 && o.Dims == shape[3] && o.Dims%2 == 0 &&
		o.Offset >= 0 && o.Offset+shape[2] < 1<<24 // positions exact in float32, as MLX's are
}

// ropeRows rotates a (B, H, L, D) as mlx.fast.rope's fallback does, with rows
// [offset, offset+L) of the table for k. It runs on the worker inside s.
func (be *Backend) ropeRows(s *scope, a C.mlxc_array, shape []int, k ropeKey, offset int) C.mlxc_array {
	t, err := be.ropeTableFor(k, offset+shape[2])
	if err != nil {
		s.fail(err)
		return C.mlxc_array{}
	}
	B, H, L, half := shape[0], shape[1], shape[2], k.dims/2
	slice := func(x C.mlxc_array, start, stop []int) C.mlxc_array {
		st, sp, one := cints(start), cints(stop), cints([]int{1, 1, 1, 1}[:len(start)])
		n := C.size_t(len(st))
		return s.op("rope", func(r *C.mlxc_array) C.int { return C.mlxc_slice(r, x, ptr(st), n, ptr(sp), n, ptr(one), n, s.st) })
	}
	coss := slice(t.cos, []int{offset, 0}, []int{offset + L, half})
	sins := slice(t.sin, []int{offset, 0}, []int{offset + L, half})
	x1 := slice(a, []int{0, 0, 0, 0}, []int{B, H, L, half})
	x2 := slice(a, []int{0, 0, 0, half}, []int{B, H, L, k.dims})
	o1 := s.binary("subtract", s.binary("multiply", x1, coss), s.binary("multiply", x2, sins))
	o2 := s.binary("add", s.binary("multiply", x1, sins), s.binary("multiply", x2, coss))
	if s.err != nil {
		return C.mlxc_array{}
	}
	v := C.mlxc_vector_array_new_data(&[]C.mlxc_array{o1, o2}[0], 2)
	defer C.mlxc_vector_array_free(v)
	return s.op("rope", func(r *C.mlxc_array) C.int { return C.mlxc_concatenate_axis(r, v, -1, s.st) })
}

// ropeTableFor returns k's table holding at least n positions, making or growing it.
// It runs on the worker.
func (be *Backend) ropeTableFor(k ropeKey, n int) (*ropeTable, error) {
	if t := be.ropes[k]; t != nil && t.n >= n {
		return t, nil
	}
	size := ropeTableMin
	for size < n {
		size *= 2
	}
	s := &scope{be: be, st: be.stream}
	defer func() {
		for _, a := range s.tmp {
			C.mlxc_array_free(a)
		}
	}()
	// The fallback's ops: positions = (arange(L) + offset) * scale, which for
	// integers below 2^24 is position p as a float times scale; inverse
	// frequencies exp(arange(0, -half, -1) * (log(base) / half)); theta their
	// outer product; cos and sin, cast to the activations' dtype.
	half := k.dims / 2
	pos := make([]float32, size)
	for i := range pos {
		pos[i] = float32(i)
	}
	steps := make([]float32, half)
	for i := range steps {
		steps[i] = -float32(i)
	}
	data := func(v []float32, shape ...int) C.mlxc_array {
		cs := cints(shape)
		a := C.mlxc_array_new_data(unsafe.Pointer(ptr(v)), ptr(cs), C.int(len(cs)), dtFloat32)
		if a.ctx == nil {
			s.fail(lastError("rope table"))
			return a
		}
		s.tmp = append(s.tmp, a)
		return a
	}
	positions := s.binary("multiply", data(pos, size, 1), s.scalar(k.scale, dtFloat32))
	invFreqs := s.op("rope table", func(r *C.mlxc_array) C.int {
		return C.mlxc_exp(r, s.binary("multiply", data(steps, half), s.scalar(float32(C.mlxc_rope_step(C.float(k.base), C.int(half))), dtFloat32)), s.st)
	})
	theta := s.binary("multiply", positions, invFreqs)
	cos := s.astype(s.op("rope table", func(r *C.mlxc_array) C.int { return C.mlxc_cos(r, theta, s.st) }), k.dtype)
	sin := s.astype(s.op("rope table", func(r *C.mlxc_array) C.int { return C.mlxc_sin(r, theta, s.st) }), k.dtype)
	if s.err != nil {
		return nil, fmt.Errorf("mlx: rope table: %w", s.err)
	}
	t := &ropeTable{n: size}
	if C.mlxc_array_set(&t.cos, cos) != 0 || C.mlxc_array_set(&t.sin, sin) != 0 {
		return nil, lastError("rope table")
	}
	v := C.mlxc_vector_array_new_data(&[]C.mlxc_array{t.cos, t.sin}[0], 2)
	rc := C.mlxc_eval(v)
	C.mlxc_vector_array_free(v)
	if rc != 0 {
		C.mlxc_array_free(t.cos)
		C.mlxc_array_free(t.sin)
		return nil, lastError("rope table")
	}
	if old := be.ropes[k]; old != nil {
		C.mlxc_array_free(old.cos)
		C.mlxc_array_free(old.sin)
	}
	if be.ropes == nil {
		be.ropes = map[ropeKey]*ropeTable{}
	}
	be.ropes[k] = t
	return t, nil
}
