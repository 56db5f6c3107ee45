package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// group32 returns a 32-value group: the given leading values, the rest filled with fill.
func group32(fill float32, lead ...float32) []float32 {
	g := slices.Repeat([]float32{fill}, 32)
	copy(g, lead)
	return g
}

// f32 is the float32 nearest to x; several expected values below are "the float32 0.1".
func f32(x float64) float32 { return float32(x) }

// TestGoldenGroups checks hand-derived groups (4 bits, so n_bins = 15, group 32). Every
// number is worked out in the comment next to it, step for step as the kernels do it.
func TestGoldenGroups(t *testing.T) {
	for _, tc := range []struct {
		name        string
		k           Kernel
		round       Rounding
		w           []float32
		scale, bias float32
		q           []uint8 // expected leading values; the rest equal q of the fill value
		qFill       uint8
	}{
		// All equal to 0.5: max = min = 0.5, range/15 = 0 < eps, so scale = 1e-7, negated since
		// |min| > |max| is false; edge = max = 0.5; q0 = round(0.5 / -1e-7) = -5e6 (the float32
		// quotient is exactly 5e6 after rounding); scale = 0.5 / -5e6 = -1e-7 again, bias = 0.5;
		// every q = (0.5 - 0.5) / scale = 0, and 0*scale + 0.5 gives 0.5 back.
		{"all equal", GPU, nil, group32(0.5), -f32(1e-7), 0.5, nil, 0},
		{"all equal cpu", CPU, nil, group32(0.5), -f32(1e-7), 0.5, nil, 0},
		// |min| > |max|: max 0.5, min -1. range/15 = 1.5/15 = float32 0.1; positive because
		// |min| > |max|; edge = -1; -1/0.1f = -9.99999985 which rounds (float32) to -10, q0 = -10;
		// scale = -1/-10 = float32 0.1, bias = -1. Then q = (w+1)/0.1f: -1 -> 0; 0.5 -> 1.5/0.1f
		// = 14.99999978 -> 15; 0 -> 9.99999985 -> 10; -0.25 -> 7.49999989, whose float32 is 7.5,
		// a tie that both rint and round send to 8; 0.4505 -> 14.505 -> 15.
		{"min dominates", GPU, nil, group32(0, -1, 0.5, 0, -0.25, 0.4505), f32(0.1), -1, []uint8{0, 15, 10, 8, 15}, 10},
		{"min dominates cpu", CPU, nil, group32(0, -1, 0.5, 0, -0.25, 0.4505), f32(0.1), -1, []uint8{0, 15, 10, 8, 15}, 10},
		// Same group stored as bfloat16: the scale is rounded only when stored, 0.1f =
		// 0x3dcccccd -> 0x3dcd = 0.10009765625, and q still uses 0.1f: 0.4505 gives 15, where
		// the rounded scale would give 1.4505/0.10009765625 = 14.49 -> 14.
		{"bf16 scale rounded after q", GPU, RoundBF16, group32(0, -1, 0.5, 0, -0.25, 0.4505), 0.10009765625, -1, []uint8{0, 15, 10, 8, 15}, 10},
		// A tie: max 1.75, min -2, range/15 = 3.75/15 = 0.25 exactly; edge -2, q0 = -8,
		// scale = 0.25, bias = -2. -1.375 gives 0.625/0.25 = 2.5 exactly: the GPU kernel's
		// round goes to 3, the CPU kernel's rint to 2. 0 gives 8, 1.75 gives 15.
		{"tie gpu", GPU, nil, group32(0, -2, 1.75, -1.375), 0.25, -2, []uint8{0, 15, 3}, 8},
		{"tie cpu", CPU, nil, group32(0, -2, 1.75, -1.375), 0.25, -2, []uint8{0, 15, 2}, 8},
		// q0 rounds to 0: values -2e-8 .. 1e-8, so range/15 = 2e-9 < eps and scale = 1e-7,
		// positive since |min| > |max|; edge = -2e-8, q0 = round(-0.2) = -0, which equals 0:
		// the scale stays 1e-7 and bias = 0. Every q = round(w/1e-7) with |w/1e-7| <= 0.2 is 0.
		{"q0 zero", GPU, nil, group32(0, -2e-8, 1e-8), f32(1e-7), 0, []uint8{0, 0}, 0},
		{"q0 zero cpu", CPU, nil, group32(0, -2e-8, 1e-8), f32(1e-7), 0, []uint8{0, 0}, 0},
		// Zero range at zero: all 0, scale = -1e-7 (max(0, eps), negated), edge 0, q0 = -0 == 0,
		// so bias = 0 and every q = round(-0) = 0.
		{"all zero", GPU, nil, group32(0), -f32(1e-7), 0, nil, 0},
		{"all zero cpu", CPU, nil, group32(0), -f32(1e-7), 0, nil, 0},
		// All negative, where the kernels differ. CPU: min -4, max -1, 3/15 = float32 0.2;
		// edge -4, -4/0.2f = -19.9999997 -> float32 -20, q0 = -20, scale = -4/-20 = 0.2f,
		// bias = -4; -1 -> 3/0.2f = 14.9999998 -> 15; -2 -> 2/0.2f = 9.99999985 -> 10.
		{"all negative cpu", CPU, nil, group32(-2, -4, -1), f32(0.2), -4, []uint8{0, 15}, 10},
		// GPU: the running max starts at 0, so the range is [-4, 0]: 4/15 = float32
		// 0.26666668; edge -4, -4/0.26666668 = -14.99999925 -> float32 -14.999999 -> q0 = -15,
		// scale = -4/-15 = 0.26666668, bias = -4; -1 -> 3/0.26666668 = 11.2499995 -> 11;
		// -2 -> 7.49999963, whose float32 is 7.4999995 -> 7.
		{"all negative gpu", GPU, nil, group32(-2, -4, -1), f32(4.0 / 15), -4, []uint8{0, 11}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s, b, err := QuantizeWith(tc.k, tc.w, 1, 32, 32, 4, tc.round)
			if err != nil {
				t.Fatal(err)
			}
			if s[0] != tc.scale || b[0] != tc.bias {
				t.Errorf("scale, bias = %.9g, %.9g, want %.9g, %.9g", s[0], b[0], tc.scale, tc.bias)
			}
			want := slices.Repeat([]uint8{tc.qFill}, 32)
			copy(want, tc.q)
			if got := Unpack(p, 32, 4); !slices.Equal(got, want) {
				t.Errorf("q = %v, want %v", got, want)
			}
		})
	}
}

func TestDequantizeGolden(t *testing.T) {
	// One row, group 32, 4 bits: q = 0,1,..,15,0,.. with scale 0.5 and bias -2 gives
	// 0.5*q - 2 exactly.
	q := make([]uint8, 64)
	for i := range q {
		q[i] = uint8(i % 16)
	}
	got, err := Dequantize(Pack(q, 4), []float32{0.5, -0.25}, []float32{-2, 3}, 1, 64, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		want := 0.5*float32(q[i]) - 2
		if i >= 32 {
			want = -0.25*float32(q[i]) + 3
		}
		if v != want {
			t.Fatalf("w[%d] = %g, want %g", i, v, want)
		}
	}
}

// canonical builds a quantized matrix in the exact form MLX emits — bias equal to the group's
// edge, every group reaching both q = 0 and q = n_bins — with power-of-two scales, so that
// dequantizing is exact and quantizing the result must give the same words back.
func canonical(rng *rand.Rand, rows, cols, groupSize, bits int) (q []uint8, scales, biases []float32) {
	nBins := 1<<bits - 1
	q = make([]uint8, rows*cols)
	scales = make([]float32, rows*cols/groupSize)
	biases = make([]float32, len(scales))
	for g := range scales {
		grp := q[g*groupSize : (g+1)*groupSize]
		for i := range grp {
			grp[i] = uint8(rng.IntN(nBins + 1))
		}
		grp[rng.IntN(groupSize/2)] = 0
		grp[groupSize/2+rng.IntN(groupSize/2)] = uint8(nBins)
		s := float32(math.Ldexp(1, -rng.IntN(12)))
		m := float32(nBins/2 + 1 + rng.IntN(nBins/2)) // |edge| = m*s beats the far end (n_bins-m)*s
		if rng.IntN(2) == 0 {
			scales[g], biases[g] = s, -m*s // edge is the minimum
		} else {
			scales[g], biases[g] = -s, m*s // edge is the maximum
		}
	}
	return q, scales, biases
}

func TestQuantizeDequantizeIsIdentityOnCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range []Kernel{GPU, CPU} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, gs := range []int{32, 64, 128} {
				rows, cols := 3, 256
				q, s, b := canonical(rng, rows, cols, gs, bits)
				packed := make([]uint32, 0)
				for r := range rows {
					packed = append(packed, Pack(q[r*cols:(r+1)*cols], bits)...)
				}
				w, err := Dequantize(packed, s, b, rows, cols, gs, bits)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range w {
					if g := i / gs; v != s[g]*float32(q[i])+b[g] {
						t.Fatalf("bits=%d: dequantized w[%d] = %g, want %g", bits, i, v, s[g]*float32(q[i])+b[g])
					}
				}
				p2, s2, b2, err := QuantizeWith(k, w, rows, cols, gs, bits, RoundBF16)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(p2, packed) || !slices.Equal(s2, s) || !slices.Equal(b2, b) {
					t.Fatalf("%v bits=%d group=%d: quantize(dequantize(x)) != x", k, bits, gs)
				}
			}
		}
	}
}

// TestRoundTripError checks every value of random normal data against the quantization grid
// of its group. A value within the grid's span comes back within half a step |s|/2. MLX's
// snapping of the scale to edge/q0 can shrink the grid so that its far end falls short of the
// group's far value (by less than one step); such a value is clipped to the end, so the bound
// adds its distance to the grid's span. On normal data about one group in three has one.
func TestRoundTripError(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 64, 512
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	for _, k := range []Kernel{GPU, CPU} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, gs := range []int{32, 64, 128} {
				p, s, b, err := QuantizeWith(k, w, rows, cols, gs, bits, nil)
				if err != nil {
					t.Fatal(err)
				}
				d, err := Dequantize(p, s, b, rows, cols, gs, bits)
				if err != nil {
					t.Fatal(err)
				}
				nBins := float32(int(1)<<bits - 1)
				beyond, worst := 0, float32(0)
				for i := range w {
					g := i / gs
					lo, hi := b[g], b[g]+s[g]*nBins
					lo, hi = min(lo, hi), max(lo, hi)
					outside := max(0, lo-w[i], w[i]-hi)
					err := abs32(w[i] - d[i])
					step := abs32(s[g])
					if err > step/2*(1+1e-6)+outside+1e-6 {
						t.Fatalf("%v bits=%d group=%d: |w-deq| = %g at w=%g, half step %g, outside grid by %g", k, bits, gs, err, w[i], step/2, outside)
					}
					// The grid falls short by (s0-s)*n_bins with |s0-s| <= s0/(2|q0|) and
					// |q0| >= n_bins/2, so by less than one step.
					if outside > step*(1+1e-6) {
						t.Fatalf("%v bits=%d group=%d: grid misses w=%g by %g, more than a step %g", k, bits, gs, w[i], outside, step)
					}
					if outside > 0 {
						beyond++
					}
					worst = max(worst, err/step)
				}
				t.Logf("%v bits=%d group=%d: %d of %d values beyond the grid, worst error %.3f steps", k, bits, gs, beyond, len(w), worst)
			}
		}
	}
}

func TestInvalidInputs(t *testing.T) {
	w := make([]float32, 64)
	for _, tc := range []struct {
		name              string
		w                 []float32
		rows, cols, gs, b int
		want              error
	}{
		{"7 bits", w, 1, 64, 32, 7, ErrUnsupported},
		{"1 bit", w, 1, 64, 32, 1, ErrUnsupported},
		{"9 bits", w, 1, 64, 32, 9, ErrUnsupported},
		{"group 16", w, 1, 64, 16, 4, ErrUnsupported},
		{"group 256", w, 1, 64, 256, 4, ErrUnsupported},
		{"cols not multiple of group", w, 2, 32, 64, 4, ErrShape},
		{"length mismatch", w, 3, 32, 32, 4, ErrShape},
		{"negative rows", w, -2, -32, 32, 4, ErrShape},
		{"zero cols", nil, 1, 0, 32, 4, ErrShape},
	} {
		if _, _, _, err := Quantize(tc.w, tc.rows, tc.cols, tc.gs, tc.b, nil); !errors.Is(err, tc.want) {
			t.Errorf("Quantize %s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	p, s, b, err := Quantize(w, 1, 64, 32, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		p       []uint32
		s, b    []float32
		bits    int
		wantErr error
	}{
		{"short packed", p[:7], s, b, 4, ErrShape},
		{"short scales", p, s[:1], b, 4, ErrShape},
		{"long biases", p, s, append(b, 0), 4, ErrShape},
		{"wrong bits", p, s, b, 3, ErrShape},
		{"bits 7", p, s, b, 7, ErrUnsupported},
	} {
		if _, err := Dequantize(tc.p, tc.s, tc.b, 1, 64, 32, tc.bits); !errors.Is(err, tc.wantErr) {
			t.Errorf("Dequantize %s: err = %v, want %v", tc.name, err, tc.wantErr)
		}
	}
}

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        Rounding
		in, want float32
	}{
		{"bf16 0.1", RoundBF16, 0.1, 0.10009765625},
		{"bf16 tie to even", RoundBF16, math.Float32frombits(0x3f808000), 1},
		{"bf16 tie up to even", RoundBF16, math.Float32frombits(0x3f818000), math.Float32frombits(0x3f820000)},
		{"bf16 overflow", RoundBF16, math.MaxFloat32, float32(math.Inf(1))},
		{"f16 0.1", RoundF16, 0.1, 0.0999755859375},
		{"f16 max", RoundF16, 65504, 65504},
		{"f16 below overflow", RoundF16, 65519, 65504},
		{"f16 overflow", RoundF16, -65520, float32(math.Inf(-1))},
		{"f16 subnormal", RoundF16, 1e-7, 0x1p-23},
		{"f16 underflow", RoundF16, 2e-8, 0},
		{"f16 tie to even", RoundF16, 1 + 0x1p-11, 1},
	} {
		if got := tc.r(tc.in); got != tc.want {
			t.Errorf("%s: %g -> %g, want %g", tc.name, tc.in, got, tc.want)
		}
	}
	if got := RoundBF16(float32(math.NaN())); got == got {
		t.Errorf("bf16 NaN -> %g, want NaN", got)
	}
}
