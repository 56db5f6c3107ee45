// Package cpu is mlxbridge's portable backend: float32 compute in Go, with matrix
// products through cblas (OpenBLAS on Linux, Accelerate on macOS) and elementwise,
// reduction, normalization and attention kernels spread over all cores. It runs
// everywhere, is the reference the mlx backend is checked against, and is what CI uses.
//
// Import it for its side effect of registering the "cpu" backend:
//
//	import _ "github.com/inloop/inloop/mlxbridge/cpu"
package cpu

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/blas"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/par"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/qmm"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

func init() {
	mx.Register("cpu", 0, func() (mx.Backend, error) { return New(), nil })
}

// Backend is the cpu backend. Its arrays are immutable contiguous row-major buffers.
type Backend struct{}

// New returns a cpu backend; most code uses mlxbridge.Open("cpu") instead. The
// first call starts the Go heap's pacer (pace.go).
func New() *Backend {
	startPacing()
	return &Backend{}
}

func (*Backend) Name() string { return "cpu" }

// Describe is one line for logs and `inloop doctor`: the backend and the BLAS it
// multiplies with, whose kernels decide how fast training and prefill run.
func (*Backend) Describe() string { return "cpu (" + blas.Describe() + ")" }

// buf holds an array's data. Exactly one slice is used, chosen by dtype: f for the
// float dtypes (Float16/BFloat16 values are kept rounded to their precision), i for
// Int32, u for Uint32, b for Uint8 and Bool. A compact Float16/BFloat16 array (Compact)
// holds its values' bits in s instead.
type buf struct {
	f []float32
	i []int32
	u []uint32
	b []uint8
	s []uint16
}

// newBuf allocates n zeroed elements in the slice dt uses.
func newBuf(dt mx.DType, n int) *buf {
	switch dt {
	case mx.Int32:
		return &buf{i: make([]int32, n)}
	case mx.Uint32:
		return wordBuf(n, true)
	case mx.Uint8, mx.Bool:
		return &buf{b: make([]uint8, n)}
	}
	return &buf{f: make([]float32, n)}
}

// h returns a's data for reading, a compact array's widened to float32 in a fresh buffer.
// That buffer is Go memory, so a kernel holding only its slice keeps it alive. Kernels
// that read compact arrays at their width (MatMul, Take) use raw instead.
func h(a *mx.Array) *buf {
	b := raw(a)
	if b.s != nil {
		f := make([]float32, len(b.s))
		qmm.HalfWiden(f, b.s, a.DType() == mx.Float16)
		return &buf{f: f}
	}
	return b
}

// raw returns a's data as held.
func raw(a *mx.Array) *buf { return a.Handle().(*buf) }

// compactBuf returns a buffer for n 16-bit values from the same pool as the float ones
// (half as many floats, viewed as uint16).
func compactBuf(n int) *buf {
	f := newF((n + 1) / 2)
	b := fbuf(f)
	b.f, b.s = nil, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(f))), n)[:n:n]
	return b
}

// wordBuf is an array buffer of n uint32 words (packed quantized weights) in the C
// memory float buffers use, zeroed where zero is set: weights that decoding streams
// every token then sit on the huge pages that memory asks for (pool.go), which read
// 15–20% faster than the Go heap's 4 KiB pages (measured streaming 700 MB of a
// matrix-vector product on the 2-core EPYC slice).
func wordBuf(n int, zero bool) *buf {
	alloc := newF
	if zero {
		alloc = newFZero
	}
	f := alloc(n)
	b := fbuf(f)
	b.f, b.u = nil, unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(f))), n)[:n:n]
	return b
}

// CompactBits holds the 16-bit values whose little-endian bit patterns raw holds.
func (be *Backend) CompactBits(dt mx.DType, raw []byte) (mx.Handle, error) {
	b := compactBuf(len(raw) / 2)
	parallel(len(b.s), 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			b.s[i] = binary.LittleEndian.Uint16(raw[2*i:])
		}
	})
	return b, nil
}

// Compact holds a Float16/BFloat16 array's values two bytes each.
func (be *Backend) Compact(x *mx.Array) (mx.Handle, error) {
	src := raw(x)
	if src.s != nil {
		return src, nil
	}
	n := len(src.f)
	b := compactBuf(n)
	narrow := safetensors.Float32ToFloat16 // exact: the values are already rounded
	if x.DType() == mx.BFloat16 {
		narrow = safetensors.Float32ToBFloat16
	}
	parallel(n, 1<<14, func(lo, hi int) {
		for i, v := range src.f[lo:hi] {
			b.s[lo+i] = narrow(v)
		}
	})
	return b, nil
}

// Memory reports what the process holds for computation: the bytes of live arrays
// (counted one array at a time), the free list kept for reuse, and the Go heap that
// survived the last collection. Peak is the highest array-plus-free-list figure
// since the process started plus the Go heap now.
func (be *Backend) Memory() (active, peak int64) {
	arrays, pooled, p := arrayBytes()
	g := goHeapLive()
	return arrays + pooled + g, max(p+g, arrays+pooled+g)
}

// ClearCache gives the buffers kept for reuse back to the system.
func (be *Backend) ClearCache() error {
	clearPool()
	return nil
}

// ResetPeakMemory restarts the peak from the array and pool bytes held now.
func (be *Backend) ResetPeakMemory() { resetPeak() }

// MemoryDetail splits Memory's active figure into its parts.
func MemoryDetail() (arrays, pooled, goHeap int64) {
	a, p, _ := arrayBytes()
	return a, p, goHeapLive()
}

func (be *Backend) FromData(dt mx.DType, shape []int, data any) (mx.Handle, error) {
	switch d := data.(type) {
	case []float32:
		f := newF(len(d))
		copy(f, d)
		return fbuf(f), nil
	case []int32:
		return &buf{i: append([]int32(nil), d...)}, nil
	case []uint32:
		b := wordBuf(len(d), false)
		copy(b.u, d)
		return b, nil
	case []uint8:
		return &buf{b: append([]uint8(nil), d...)}, nil
	}
	return nil, fmt.Errorf("cpu: unsupported data %T", data)
}

func (be *Backend) Data(a *mx.Array) (any, error) {
	b := h(a)
	switch a.DType() {
	case mx.Int32:
		return append([]int32(nil), b.i...), nil
	case mx.Uint32:
		return append([]uint32(nil), b.u...), nil
	case mx.Uint8, mx.Bool:
		return append([]uint8(nil), b.b...), nil
	}
	return append([]float32(nil), b.f...), nil
}

// Float32sInto is mx.FloatReader's: a float array copied into dst's storage.
func (be *Backend) Float32sInto(a *mx.Array, dst []float32) ([]float32, error) {
	return append(dst[:0], h(a).f...), nil
}

// Reshape shares the buffer: arrays are immutable and contiguous.
func (be *Backend) Reshape(x *mx.Array, shape []int) (mx.Handle, error) { return raw(x), nil }

// roundTo keeps Float16/BFloat16 results at their storage precision.
func roundTo(dt mx.DType, v []float32) {
	if dt != mx.Float16 && dt != mx.BFloat16 {
		return
	}
	r := mx.RoundFloat16
	if dt == mx.BFloat16 {
		r = mx.RoundBFloat16
	}
	parallel(len(v), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] = r(v[i])
		}
	})
}

// parallel splits [0, n) into contiguous chunks of at least grain items and runs
// f on them across cores (package par's workers); small jobs run inline.
func parallel(n, grain int, f func(lo, hi int)) {
	w := min(par.Cores(), n/max(grain, 1))
	if w <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	par.Ranges(n, 1, w, f)
}

// stridesOf returns contiguous row-major strides.
func stridesOf(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// bstrides aligns shape's strides to out (same or higher rank), 0 on broadcast axes.
func bstrides(shape, out []int) []int {
	s := stridesOf(shape)
	r := make([]int, len(out))
	lead := len(out) - len(shape)
	for i := range shape {
		if shape[i] != 1 || out[lead+i] == 1 {
			r[lead+i] = s[i]
		}
	}
	return r
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// rows walks the rows (all axes but the last) of shape [lo, hi), giving each row's
// index and the offsets of len(strides) operands, for an odometer over strided data.
func rows(shape []int, strides [][]int, base []int, lo, hi int, f func(row int, offs []int)) {
	nd := len(shape)
	idx := make([]int, max(nd-1, 0))
	offs := append([]int(nil), base...)
	r := lo
	for d := nd - 2; d >= 0; d-- {
		idx[d] = r % shape[d]
		r /= shape[d]
		for k := range offs {
			offs[k] += idx[d] * strides[k][d]
		}
	}
	for row := lo; row < hi; row++ {
		f(row, offs)
		for d := nd - 2; d >= 0; d-- {
			idx[d]++
			for k := range offs {
				offs[k] += strides[k][d]
			}
			if idx[d] < shape[d] {
				break
			}
			for k := range offs {
				offs[k] -= strides[k][d] * shape[d]
			}
			idx[d] = 0
		}
	}
}

// gather copies the strided view (shape, strides from base) of src into contiguous dst.
func gather[T any](dst, src []T, shape, strides []int, base int) {
	nd := len(shape)
	if nd == 0 {
		dst[0] = src[base]
		return
	}
	inner, is := shape[nd-1], strides[nd-1]
	if inner == 0 || len(dst) == 0 {
		return
	}
	n := len(dst) / inner
	parallel(n, max(1, 4096/inner), func(lo, hi int) {
		rows(shape, [][]int{strides}, []int{base}, lo, hi, func(row int, offs []int) {
			d, o := dst[row*inner:row*inner+inner], offs[0]
			if is == 1 {
				copy(d, src[o:o+inner])
				return
			}
			for j := range d {
				d[j] = src[o+j*is]
			}
		})
	})
}

// outBuf is a kernel's output buffer of n elements with garbage contents: float ones
// in C memory (see pool.go), owned by the returned buf from the start.
func outBuf(dt mx.DType, n int) *buf {
	if dt.IsFloat() {
		return fbuf(newF(n))
	}
	return newBuf(dt, n)
}

// gatherOut is gatherBuf for a kernel's output.
func gatherOut(dt mx.DType, src *buf, n int, shape, strides []int, base int) *buf {
	if !dt.IsFloat() {
		return gatherBuf(dt, src, n, shape, strides, base)
	}
	d := newF(n)
	gather(d, src.f, shape, strides, base)
	return fbuf(d)
}

// gatherBuf applies gather to whichever slice the dtype uses.
func gatherBuf(dt mx.DType, src *buf, n int, shape, strides []int, base int) *buf {
	switch dt {
	case mx.Int32:
		d := make([]int32, n)
		gather(d, src.i, shape, strides, base)
		return &buf{i: d}
	case mx.Uint32:
		d := make([]uint32, n)
		gather(d, src.u, shape, strides, base)
		return &buf{u: d}
	case mx.Uint8, mx.Bool:
		d := make([]uint8, n)
		gather(d, src.b, shape, strides, base)
		return &buf{b: d}
	}
	d := make([]float32, n)
	gather(d, src.f, shape, strides, base)
	return &buf{f: d}
}

var (
	_ mx.Backend             = (*Backend)(nil)
	_ mx.QuantizedMatMulerA8 = (*Backend)(nil)
	_ mx.CacheClearer        = (*Backend)(nil)
	_ mx.AdamUpdater         = (*Backend)(nil)
	_ mx.GlobalNormer        = (*Backend)(nil)
	_ mx.Sorter              = (*Backend)(nil)
	_ mx.CumSummer           = (*Backend)(nil)
	_ mx.PartsAttender       = (*Backend)(nil)
	_ mx.Compacter           = (*Backend)(nil)
	_ mx.QuantizedAttender   = (*Backend)(nil)
	_ mx.CrossEntropyGrader  = (*Backend)(nil)
	_ mx.RMSNormGrader       = (*Backend)(nil)
	_ mx.LowRankAdder        = (*Backend)(nil)
)
