//go:build cgo && (darwin || linux)

package mlx

import (
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
)

// quantRows makes a (rows, cols) weight whose rows exercise the corner cases of
// affine quantization: ordinary normals, wide ranges, all-negative and
// all-positive groups, constant and zero groups, values on exact rounding ties,
// tiny values and a single outlier.
func quantRows(seed uint64, rows, cols int) []float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	w := make([]float32, rows*cols)
	for i := 0; i < rows; i++ {
		row := w[i*cols : (i+1)*cols]
		for j := range row {
			g := r.NormFloat64()
			switch i % 9 {
			case 0:
				row[j] = float32(g)
			case 1:
				row[j] = float32(g * 30)
			case 2:
				row[j] = -float32(math.Abs(g)) - 0.01 // all negative
			case 3:
				row[j] = float32(math.Abs(g)) + 0.01 // all positive
			case 4:
				row[j] = 0.375 // constant
			case 5:
				row[j] = 0
			case 6: // integers and halves on a grid of step 1 from 0 to 15: ties
				row[j] = float32(r.IntN(31)) / 2
				if j%32 == 0 {
					row[j] = 0
				} else if j%32 == 1 {
					row[j] = 15
				}
			case 7:
				row[j] = float32(g * 1e-6)
			case 8:
				row[j] = float32(g * 0.02)
				if j == 5 {
					row[j] = 4
				}
			}
		}
	}
	return w
}

// TestQuantizeBitExact holds package quant, our pure-Go MLX quantization, against
// MLX's own mx.quantize: every packed word, scale and bias must be identical. The
// kernel quant reproduces is chosen by the stream MLX runs on (its CPU and GPU
// quantize kernels differ on all-negative groups and exact ties).
func TestQuantizeBitExact(t *testing.T) {
	be := openOrSkip(t)
	kernel := quant.CPU
	if be.gpu {
		kernel = quant.GPU
	}
	t.Logf("MLX %s on %s: comparing with quant's %s kernel", be.Version(), be.Device(), kernel)
	const rows, cols = 18, 256
	diffRows := map[int]int{}
	defer func() { t.Logf("groups where quant's other kernel differs, by row kind (see quantRows): %v", diffRows) }()
	for _, dt := range []mx.DType{mx.Float32, mx.Float16, mx.BFloat16} {
		round := map[mx.DType]quant.Rounding{mx.Float16: quant.RoundF16, mx.BFloat16: quant.RoundBF16}[dt]
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				w := quantRows(uint64(bits*1000+group), rows, cols)
				if round != nil {
					for i := range w {
						w[i] = round(w[i])
					}
				}
				wq, sc, bi, err := be.quantize(mx.FromData(be, dt, w, rows, cols), group, bits)
				if err != nil {
					t.Fatalf("%s %d-bit group %d: %v", dt, bits, group, err)
				}
				pk, ss, bb, err := quant.QuantizeWith(kernel, w, rows, cols, group, bits, round)
				if err != nil {
					t.Fatal(err)
				}
				if wq.DType() != mx.Uint32 || sc.DType() != dt || bi.DType() != dt {
					t.Fatalf("%s %d-bit: MLX gave %s words, %s scales, %s biases", dt, bits, wq.DType(), sc.DType(), bi.DType())
				}
				gotW, _ := wq.Uint32s()
				gotS, _ := sc.Float32s()
				gotB, _ := bi.Float32s()
				if len(gotW) != len(pk) || len(gotS) != len(ss) {
					t.Fatalf("%s %d-bit group %d: MLX gave %d words %d scales, quant %d and %d", dt, bits, group, len(gotW), len(gotS), len(pk), len(ss))
				}
				wordsPerRow := len(pk) / rows
				for i := range pk {
					if gotW[i] != pk[i] {
						t.Errorf("%s %d-bit group %d: row %d word %d: MLX %#08x, quant %#08x", dt, bits, group, i/wordsPerRow, i%wordsPerRow, gotW[i], pk[i])
						break
					}
				}
				groups := cols / group
				if other := 1 - kernel; true {
					// How the other kernel differs, group by group: logged, not failed.
					_, os, ob, _ := quant.QuantizeWith(other, w, rows, cols, group, bits, round)
					for i := range os {
						if os[i] != ss[i] || ob[i] != bb[i] {
							diffRows[i/groups%9]++
						}
					}
				}
				for i := range ss {
					if math.Float32bits(gotS[i]) != math.Float32bits(ss[i]) || math.Float32bits(gotB[i]) != math.Float32bits(bb[i]) {
						t.Errorf("%s %d-bit group %d: row %d group %d: MLX scale %.9g bias %.9g, quant %.9g %.9g",
							dt, bits, group, i/groups, i%groups, gotS[i], gotB[i], ss[i], bb[i])
						break
					}
				}
			}
		}
	}
}

// TestQuantizedMatmulMatchesDequantize checks MLX's fused product against its own
// dequantize of our packing, so a checkpoint quantized in Go computes the same on
// both backends.
func TestQuantizedMatmulMatchesDequantize(t *testing.T) {
	be := openOrSkip(t)
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		w := mx.FromData(be, mx.Float32, quantRows(uint64(bits), 9, 128), 9, 128)
		wq, sc, bi := mx.Quantize(w, 64, bits)
		x := mx.FromData(be, mx.Float32, quantRows(99, 3, 128), 3, 128)
		got, err := mx.QuantizedMatmul(x, wq, sc, bi, true, 64, bits).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		want, err := mx.MatmulT(x, mx.Dequantize(wq, sc, bi, 64, bits), false, true).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-3+1e-4*math.Abs(float64(want[i])) {
				t.Errorf("%d-bit: element %d: fused %g, dequantized %g", bits, i, got[i], want[i])
			}
		}
	}
}
