// Package quant is MLX's affine quantization, reproduced bit for bit in pure Go.
//
// A weight matrix is cut into groups of 32, 64 or 128 values along its last axis; each group
// gets a scale s and a bias b, and each value becomes an integer q of 2..8 bits with
// w ≈ s*q + b. The packed words, scales and biases Quantize returns are identical to what
// mx.quantize(w, group_size, bits) returns, so a model quantized by Inloop loads in mlx-lm,
// an mlx-community checkpoint loads here, and the cpu and mlx backends agree exactly.
//
// MLX has two quantize kernels that differ in two corner cases (see Kernel); Quantize follows
// the GPU one, which is what mx.quantize runs on a Mac and hence what mlx_lm.convert writes.
// The arithmetic follows MLX's source as of ml-explore/mlx 846d176 (August 2026). The golden
// tests here are worked by hand; the mlx backend's tests compare against a real MLX (0.31.1,
// CPU kernel: identical in every word, scale and bias) wherever libmlxc loads.
package quant

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/inloop/inloop/mlxbridge/safetensors"
)

var (
	// ErrUnsupported reports a bit width or group size MLX does not quantize with.
	ErrUnsupported = errors.New("quant: unsupported parameters")
	// ErrShape reports slice lengths that disagree with the shape given.
	ErrShape = errors.New("quant: shape mismatch")
)

// Validate reports whether MLX's affine mode supports this bit width and group size.
func Validate(bits, groupSize int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("%w: %d bits (want 2, 3, 4, 5, 6 or 8)", ErrUnsupported, bits)
	}
	switch groupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("%w: group size %d (want 32, 64 or 128)", ErrUnsupported, groupSize)
	}
	return nil
}

// Rounding rounds a float32 to the precision of the weight's storage dtype. MLX computes a
// group's scale and bias in float32 and casts them to the weight dtype only when storing
// them, after the quantized values are computed; Quantize applies the Rounding at that same
// point. A nil Rounding means float32 (no rounding).
type Rounding func(float32) float32

// RoundBF16 rounds to bfloat16 the way MLX's _MLX_BFloat16(float) constructor does
// (mlx/types/bf16.h): round to nearest even on the upper 16 bits, NaN to a quiet NaN.
func RoundBF16(x float32) float32 {
	return safetensors.BFloat16ToFloat32(safetensors.Float32ToBFloat16(x))
}

// RoundF16 rounds to IEEE half precision, round to nearest even, overflowing to ±Inf and
// keeping half's subnormals; this is what a float to float16 cast does in MLX.
func RoundF16(x float32) float32 {
	return safetensors.Float16ToFloat32(safetensors.Float32ToFloat16(x))
}

func (r Rounding) apply(x float32) float32 {
	if r == nil {
		return x
	}
	return r(x)
}

// Kernel names the MLX quantize kernel whose float32 arithmetic is reproduced. The two agree
// on every group except (a) groups whose values are all negative, where the GPU kernel starts
// its running maximum at 0 and so uses the range [min, 0], and (b) exact ties q+0.5, which the
// GPU rounds away from zero (Metal/CUDA round) and the CPU to even (std::rint).
type Kernel int

const (
	// GPU mirrors affine_quantize in mlx/backend/metal/kernels/quantized.h; the CUDA kernel
	// in mlx/backend/cuda/quantized/affine_quantize.cu has the same arithmetic.
	GPU Kernel = iota
	// CPU mirrors quantize<T,U> in mlx/backend/cpu/quantized.cpp (fast::Quantize::eval_cpu),
	// whose arithmetic is also that of the graph fallback in mlx/ops.cpp affine_quantize.
	CPU
)

func (k Kernel) String() string {
	if k == CPU {
		return "cpu"
	}
	return "gpu"
}

// ParseKernel reads a kernel's name, "gpu" or "cpu" (String's spelling).
func ParseKernel(s string) (Kernel, error) {
	switch s {
	case "gpu":
		return GPU, nil
	case "cpu":
		return CPU, nil
	}
	return GPU, fmt.Errorf("%w: kernel %q (want gpu or cpu)", ErrUnsupported, s)
}

// Quantize quantizes the row-major (rows, cols) matrix w with MLX's GPU kernel. It returns
// packed (rows, PackedLen(cols, bits)) words and (rows, cols/groupSize) scales and biases,
// each passed through round to emulate the weight dtype.
func Quantize(w []float32, rows, cols, groupSize, bits int, round Rounding) (packed []uint32, scales, biases []float32, err error) {
	return QuantizeWith(GPU, w, rows, cols, groupSize, bits, round)
}

// QuantizeWith is Quantize with the arithmetic of the given MLX kernel.
func QuantizeWith(k Kernel, w []float32, rows, cols, groupSize, bits int, round Rounding) (packed []uint32, scales, biases []float32, err error) {
	if err := Validate(bits, groupSize); err != nil {
		return nil, nil, nil, err
	}
	if err := checkShape(len(w), rows, cols, groupSize); err != nil {
		return nil, nil, nil, err
	}
	words := PackedLen(cols, bits)
	packed = make([]uint32, rows*words)
	scales = make([]float32, rows*(cols/groupSize))
	biases = make([]float32, len(scales))
	forRows(rows, cols, func(r0, r1 int) {
		q := make([]uint8, cols)
		g := cols / groupSize
		for r := r0; r < r1; r++ {
			row := w[r*cols : (r+1)*cols]
			for j := 0; j < g; j++ {
				s, b := quantizeGroup(k, q[j*groupSize:(j+1)*groupSize], row[j*groupSize:(j+1)*groupSize], bits)
				scales[r*g+j] = round.apply(s)
				biases[r*g+j] = round.apply(b)
			}
			packInto(packed[r*words:(r+1)*words], q, bits)
		}
	})
	return packed, scales, biases, nil
}

// quantizeGroup writes the quantized values of one group into q and returns its float32
// scale and bias, before any rounding to the weight dtype. Every operation is a single
// float32 operation in the order the MLX kernels perform them (Go rounds each float32
// operation, and nothing here is a multiply-add it could fuse).
func quantizeGroup(k Kernel, q []uint8, w []float32, bits int) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	const eps = float32(1e-7)

	// Range scan. CPU: w_min = +inf, w_max = -inf, std::min/std::max. GPU: w_min =
	// Limits::max, w_max = 0, metal::min/max. Both skip NaN: std::max(m, v) keeps m
	// when m < v is false, and metal/CUDA min/max return the non-NaN operand.
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	if k == GPU {
		lo, hi = math.MaxFloat32, 0
	}
	for _, v := range w {
		if v > hi {
			hi = v
		}
		if v < lo {
			lo = v
		}
	}

	// scale = max((w_max - w_min) / n_bins, eps), negated unless |w_min| > |w_max|.
	scale = (hi - lo) / nBins
	if k == CPU {
		if scale < eps { // std::max(scale, eps): NaN stays NaN
			scale = eps
		}
	} else if scale < eps || scale != scale { // metal::max: NaN yields eps
		scale = eps
	}
	side := abs32(lo) > abs32(hi)
	edge := hi
	if side {
		edge = lo
	} else {
		scale = -scale
	}
	// Snap the scale so that the edge is exactly representable: q0 = round(edge/scale);
	// unless q0 == 0 (a group of values below eps/2 in size), scale = edge/q0, bias = edge.
	q0 := roundK(k, edge/scale)
	if q0 != 0 {
		scale = edge / q0
		bias = edge
	}

	// q = clip(round((w - bias) / scale), 0, n_bins), with the float32 scale and bias (not
	// the ones rounded to the weight dtype). No value of a finite group falls below 0; the
	// clamps only matter for Inf and NaN, where MLX's float-to-integer cast is undefined.
	for i, v := range w {
		x := roundK(k, (v-bias)/scale)
		switch {
		case x != x: // CPU: the cast of NaN is undefined, we write 0; GPU: metal::min(NaN, n_bins) = n_bins
			if k == GPU {
				x = nBins
			} else {
				x = 0
			}
		case x > nBins:
			x = nBins
		case x < 0:
			x = 0
		}
		q[i] = uint8(x)
	}
	return scale, bias
}

// roundK is std::rint (half to even) for the CPU kernel and Metal/CUDA round (half away from
// zero) for the GPU kernel. Rounding a float32 in float64 is exact.
func roundK(k Kernel, x float32) float32 {
	if k == CPU {
		return float32(math.RoundToEven(float64(x)))
	}
	return float32(math.Round(float64(x)))
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// Dequantize returns the row-major (rows, cols) matrix w = scale*q + bias, computed in
// float32 as a multiply rounded to float32 and then an add, the unfused order of MLX's
// affine_dequantize (a fused multiply-add could differ in the last bit).
func Dequantize(packed []uint32, scales, biases []float32, rows, cols, groupSize, bits int) ([]float32, error) {
	return DequantizeRounded(packed, scales, biases, rows, cols, groupSize, bits, nil)
}

// DequantizeRounded is Dequantize in the scales' storage precision: the product and
// then the sum are each rounded by round, as MLX's CPU dequantize computes
// multiply(q, scales) and add(·, biases) in bfloat16 or float16 when the scales
// are. A nil round is Dequantize.
func DequantizeRounded(packed []uint32, scales, biases []float32, rows, cols, groupSize, bits int, round Rounding) ([]float32, error) {
	if err := Validate(bits, groupSize); err != nil {
		return nil, err
	}
	if err := checkShape(rows*cols, rows, cols, groupSize); err != nil {
		return nil, err
	}
	words := PackedLen(cols, bits)
	g := cols / groupSize
	if len(packed) != rows*words {
		return nil, fmt.Errorf("%w: %d packed words for (%d, %d) at %d bits, want %d", ErrShape, len(packed), rows, cols, bits, rows*words)
	}
	if len(scales) != rows*g || len(biases) != rows*g {
		return nil, fmt.Errorf("%w: %d scales and %d biases for (%d, %d) with group %d, want %d", ErrShape, len(scales), len(biases), rows, cols, groupSize, rows*g)
	}
	out := make([]float32, rows*cols)
	forRows(rows, cols, func(r0, r1 int) {
		q := make([]uint8, cols)
		for r := r0; r < r1; r++ {
			unpackInto(q, packed[r*words:(r+1)*words], bits)
			row := out[r*cols : (r+1)*cols]
			for i, v := range q {
				j := r*g + i/groupSize
				row[i] = round.apply(round.apply(float32(scales[j]*float32(v))) + biases[j])
			}
		}
	})
	return out, nil
}

// checkShape validates a (rows, cols) matrix of n values quantized in groups of groupSize.
func checkShape(n, rows, cols, groupSize int) error {
	if rows < 0 || cols <= 0 {
		return fmt.Errorf("%w: shape (%d, %d)", ErrShape, rows, cols)
	}
	if cols%groupSize != 0 {
		return fmt.Errorf("%w: %d columns are not a multiple of the group size %d", ErrShape, cols, groupSize)
	}
	if rows > math.MaxInt/cols || n != rows*cols {
		return fmt.Errorf("%w: %d values for shape (%d, %d)", ErrShape, n, rows, cols)
	}
	return nil
}

// forRows runs fn over row ranges, on several goroutines when the matrix is large enough
// for that to pay (quantizing a whole model is otherwise seconds of one core).
func forRows(rows, cols int, fn func(r0, r1 int)) {
	workers := min(runtime.GOMAXPROCS(0), rows, rows*cols/(1<<18)+1)
	if workers <= 1 {
		fn(0, rows)
		return
	}
	var wg sync.WaitGroup
	for i := range workers {
		r0, r1 := rows*i/workers, rows*(i+1)/workers
		wg.Go(func() { fn(r0, r1) })
	}
	wg.Wait()
}
