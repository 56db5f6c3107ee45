package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// fuzzFloats turns bytes into float32 bit patterns, so the fuzzer reaches NaN, Inf, huge and
// subnormal values directly.
func fuzzFloats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func floatBytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// FuzzQuantize quantizes arbitrary float32 data. It must never panic or fail on a valid
// shape, and where a group is finite (and its range does not overflow float32, in which case
// MLX itself produces Inf*0 = NaN) every dequantized value must lie within half a step of
// the group's [min, max].
func FuzzQuantize(f *testing.F) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	f.Add(byte(0), floatBytes(1, -2, 3, 0.5))
	f.Add(byte(7), floatBytes(nan, 1, -1, inf))
	f.Add(byte(19), floatBytes(math.MaxFloat32, -math.MaxFloat32, 1e-45, -1e-40))
	f.Add(byte(40), floatBytes(-inf, -inf, 3e38, -3e38, 1e30))
	f.Add(byte(77), floatBytes(-4, -1, -2, -3))
	f.Fuzz(func(t *testing.T, ctl byte, data []byte) {
		bits := []int{2, 3, 4, 5, 6, 8}[ctl%6]
		gs := []int{32, 64, 128}[ctl/6%3]
		k := Kernel(ctl / 18 % 2)
		round := []Rounding{nil, RoundBF16, RoundF16}[ctl/36%3]
		w := fuzzFloats(data)
		if len(w) > 1<<14 {
			w = w[:1<<14]
		}
		// Pad to whole groups, at least one row.
		for len(w) == 0 || len(w)%gs != 0 {
			w = append(w, 0)
		}
		rows, cols := len(w)/gs, gs
		p, s, b, err := QuantizeWith(k, w, rows, cols, gs, bits, round)
		if err != nil {
			t.Fatalf("Quantize: %v", err)
		}
		d, err := Dequantize(p, s, b, rows, cols, gs, bits)
		if err != nil {
			t.Fatalf("Dequantize: %v", err)
		}
		if round != nil {
			return // scales rounded to 16 bits may overflow; only panics matter here
		}
		nBins := float32(int(1)<<bits - 1)
		for g := range rows {
			grp := w[g*gs : (g+1)*gs]
			lo, hi := grp[0], grp[0]
			finite := true
			for _, v := range grp {
				finite = finite && !math.IsInf(float64(v), 0) && v == v
				lo, hi = min(lo, v), max(hi, v)
			}
			spanLo, spanHi := lo, hi
			if k == GPU {
				spanHi = max(hi, 0) // the GPU kernel's range always reaches 0
			}
			if !finite || math.IsInf(float64(spanHi-spanLo), 0) {
				continue
			}
			step := abs32(s[g])
			eps := step/2 + 4e-7*(abs32(lo)+abs32(hi)+step*nBins)
			for i, v := range d[g*gs : (g+1)*gs] {
				if !(v >= lo-eps && v <= hi+eps) {
					t.Fatalf("group %d [%g, %g], scale %g bias %g: w=%g dequantized to %g", g, lo, hi, s[g], b[g], grp[i], v)
				}
			}
		}
	})
}
