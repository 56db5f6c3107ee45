package bridgetest

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
)

// quantized checks Quantize against the reference packing in package quant, the
// round trip error per bit width, and QuantizedMatmul against Dequantize + Matmul.
func (s *suite) quantized(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			w := s.randn(uint64(bits*1000+group), 4, 256)
			wq, sc, bi := mx.Quantize(w, group, bits)
			if err := mx.Eval(wq, sc, bi); err != nil {
				t.Fatalf("quantize %d-bit group %d: %v", bits, group, err)
			}
			if got, want := wq.Shape(), []int{4, 256 * bits / 32}; got[1] != want[1] || wq.DType() != mx.Uint32 {
				t.Errorf("quantize %d-bit: packed %v %s, want %v uint32", bits, got, wq.DType(), want)
			}
			wv, _ := w.Float32s()
			pk, ss, bb, err := quant.Quantize(wv, 4, 256, group, bits, nil)
			if err != nil {
				t.Fatal(err)
			}
			gotPk, _ := wq.Uint32s()
			for i := range pk {
				if gotPk[i] != pk[i] {
					t.Fatalf("quantize %d-bit group %d: word %d is %#x, reference %#x", bits, group, i, gotPk[i], pk[i])
				}
			}
			expect(t, "scales", sc, []int{4, 256 / group}, f64(ss), 0, 0)
			expect(t, "biases", bi, []int{4, 256 / group}, f64(bb), 0, 0)
			// Inside a group's grid, |w − deq(q(w))| ≤ |scale|/2; outside it (the scale
			// is refitted so that 0 or the edge is exact) w clips to the grid's end.
			deq := get(t, mx.Dequantize(wq, sc, bi, group, bits))
			sv, bv := get(t, sc), get(t, bi)
			top := float64(int(1)<<bits - 1)
			for i, v := range deq {
				s, b := sv[i/group], bv[i/group]
				lo, hi := math.Min(b, b+top*s), math.Max(b, b+top*s)
				w := math.Min(math.Max(float64(wv[i]), lo), hi)
				lim := 1e-5
				if w == float64(wv[i]) {
					lim += math.Abs(s) / 2
				}
				if d := math.Abs(v - w); d > lim {
					t.Fatalf("%d-bit group %d: element %d: %g dequantizes to %g, off by %g > %g", bits, group, i, wv[i], v, d, lim)
				}
			}
			// The fused product equals the dequantized one, both ways round.
			for _, m := range []int{1, 3} {
				x := s.randn(uint64(m), m, 256)
				want := get(t, mx.MatmulT(x, mx.Dequantize(wq, sc, bi, group, bits), false, true))
				expect(t, "quantized_matmul", mx.QuantizedMatmul(x, wq, sc, bi, true, group, bits), []int{m, 4}, want, 1e-4, 1e-4)
				xt := s.randn(uint64(m+7), m, 4)
				want = get(t, mx.Matmul(xt, mx.Dequantize(wq, sc, bi, group, bits)))
				expect(t, "quantized_matmul untransposed", mx.QuantizedMatmul(xt, wq, sc, bi, false, group, bits), []int{m, 256}, want, 1e-4, 1e-4)
			}
		}
	}
	// Batched input and a bf16 weight: scales and biases keep the weight's dtype.
	w := mx.AsType(s.randn(5, 8, 64), mx.BFloat16)
	wq, sc, bi := mx.Quantize(w, 64, 8)
	if sc.DType() != mx.BFloat16 || bi.DType() != mx.BFloat16 {
		t.Errorf("quantize bf16: scales %s biases %s, want bfloat16", sc.DType(), bi.DType())
	}
	x := s.randn(6, 2, 3, 64)
	// The product dequantizes in float32, as MLX's kernels do; Dequantize itself
	// returns the scales' dtype, so widen them first for the reference.
	deq := mx.Dequantize(wq, mx.AsType(sc, mx.Float32), mx.AsType(bi, mx.Float32), 64, 8)
	want := get(t, mx.MatmulT(x, deq, false, true))
	expect(t, "quantized_matmul batched", mx.QuantizedMatmul(x, wq, sc, bi, true, 64, 8), []int{2, 3, 8}, want, 1e-4, 1e-4)

	// Dequantize in the scales' half type rounds the product and then the sum to
	// it, as MLX's dequantize computes multiply and add in that type.
	for _, dt := range []mx.DType{mx.BFloat16, mx.Float16} {
		round := map[mx.DType]func(float32) float32{mx.BFloat16: mx.RoundBFloat16, mx.Float16: mx.RoundFloat16}[dt]
		wq, sc, bi := mx.Quantize(mx.AsType(s.randn(8, 6, 128), dt), 32, 4)
		ones := mx.AsType(mx.AddScalar(mx.MulScalar(sc, 0), 1), mx.Float32)
		q := get(t, mx.Dequantize(wq, ones, mx.MulScalar(ones, 0), 32, 4)) // the integers
		scv, biv := get(t, sc), get(t, bi)
		ref := make([]float32, len(q))
		for i, v := range q {
			g := i / 32
			ref[i] = round(round(float32(scv[g])*float32(v)) + float32(biv[g]))
		}
		got := mx.Dequantize(wq, sc, bi, 32, 4)
		if got.DType() != dt {
			t.Errorf("dequantize %s: result is %s", dt, got.DType())
		}
		gv := get(t, got)
		for i := range ref {
			if float32(gv[i]) != ref[i] {
				t.Errorf("dequantize %s: element %d is %g, want round(round(scale·q)+bias) = %g", dt, i, gv[i], ref[i])
				break
			}
		}
	}

	for _, c := range []struct {
		name string
		err  error
	}{
		{"bits", firstErr(mx.Quantize(s.randn(1, 2, 64), 64, 7))},
		{"group", firstErr(mx.Quantize(s.randn(1, 2, 64), 48, 4))},
		{"cols", firstErr(mx.Quantize(s.randn(1, 2, 96), 64, 4))},
		{"int input", mx.QuantizedMatmul(s.randn(1, 2, 32), wq, sc, bi, true, 64, 8).Err()},
		{"scales shape", mx.QuantizedMatmul(s.randn(1, 2, 64), wq, mx.Reshape(sc, 1, 8), bi, true, 64, 8).Err()},
	} {
		if c.err == nil {
			t.Errorf("quantize %s: no error", c.name)
		}
	}
}

func firstErr(a, b, c *mx.Array) error { return a.Err() }

// quantizedBatched: weights with batch axes multiply each batch of x by its own
// matrix, both ways round, as the dequantized product does; batch axes that do
// not match are an error.
func (s *suite) quantizedBatched(t *testing.T) {
	const b, h, n, k, m = 2, 3, 5, 64, 2
	for _, bits := range []int{4, 8} {
		w := s.randn(uint64(70+bits), b, h, n, k)
		wq, sc, bi := mx.Quantize(w, 32, bits)
		deq := mx.Dequantize(wq, sc, bi, 32, bits)
		x := s.randn(3, b, h, m, k)
		expect(t, fmt.Sprintf("batched %d-bit x·wᵀ", bits), mx.QuantizedMatmul(x, wq, sc, bi, true, 32, bits),
			[]int{b, h, m, n}, get(t, mx.MatmulT(x, deq, false, true)), 1e-4, 1e-4)
		y := s.randn(4, b, h, m, n)
		expect(t, fmt.Sprintf("batched %d-bit y·w", bits), mx.QuantizedMatmul(y, wq, sc, bi, false, 32, bits),
			[]int{b, h, m, k}, get(t, mx.Matmul(y, deq)), 1e-4, 1e-4)
		if bad := mx.QuantizedMatmul(s.randn(5, h, b, m, k), wq, sc, bi, true, 32, bits); bad.Err() == nil {
			t.Errorf("batch axes (%d, %d) against weights' (%d, %d) gave %s", h, b, b, h, bad)
		}
	}
}

// quantizedA8: decoding's product on 8-bit activations is within the rounding of
// x of the exact product (each value of x moves by at most max|x|/254 over its
// aligned block of 8, so the product by at most that times |scale·q|, summed over
// the row), for one row of x,
// batched or not, in float32 and bfloat16; with more rows, where the backend
// multiplies many rows on integers (HasQuantizedA8Rows), each row is within the
// rounding of its aligned blocks of 32 and does not depend on the others, else it
// is QuantizedMatmul exactly; traced, it is QuantizedMatmul exactly. An outlier channel is in x, as in real activations.
func (s *suite) quantizedA8(t *testing.T) {
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			const n, k = 40, 640
			wq, sc, bi := mx.Quantize(s.randn(uint64(90+bits+group), n, k), group, bits)
			ones := mx.AddScalar(mx.MulScalar(sc, 0), 1)
			q := get(t, mx.Dequantize(wq, ones, mx.MulScalar(ones, 0), group, bits)) // the integers
			scv := get(t, sc)
			deq := mx.Dequantize(wq, sc, bi, group, bits)
			for _, shape := range [][]int{{1, k}, {1, 1, k}} {
				x := s.randn(uint64(7+group), shape...)
				xv := get(t, x)
				xv[k/3] = 30
				xf := make([]float32, len(xv))
				for i, v := range xv {
					xf[i] = float32(v)
				}
				x = mx.FromData(x.Backend(), mx.Float32, xf, shape...)
				amax := make([]float64, k/8) // of each aligned block of 8 values
				for j, v := range xv {
					amax[j/8] = math.Max(amax[j/8], math.Abs(v))
				}
				want := get(t, mx.MatmulT(mx.Reshape(x, 1, k), deq, false, true))
				name := fmt.Sprintf("%d-bit group %d, x %v", bits, group, shape)
				got := mx.QuantizedMatmulA8(x, wq, sc, bi, group, bits)
				if fmt.Sprint(got.Shape()) != fmt.Sprint(append(shape[:len(shape)-1:len(shape)-1], n)) {
					t.Fatalf("%s: shape %v", name, got.Shape())
				}
				gv := get(t, got)
				for i := range n {
					var bound, mag float64
					for j := range k {
						sq := math.Abs(scv[i*(k/group)+j/group] * q[i*k+j])
						bound += sq * amax[j/8] / 254
						mag += sq * math.Abs(xv[j])
					}
					if d := math.Abs(gv[i] - want[i]); d > bound+1e-5*mag+1e-6 {
						t.Fatalf("%s: out[%d] = %g, exact %g: off by %g, past the rounding bound %g", name, i, gv[i], want[i], d, bound)
					}
				}
				bx := mx.AsType(x, mx.BFloat16)
				if got := mx.QuantizedMatmulA8(bx, wq, sc, bi, group, bits); got.DType() != mx.BFloat16 || got.Err() != nil {
					t.Errorf("%s: bfloat16 x gave %s (%v)", name, got.DType(), got.Err())
				}
			}
			x3 := s.randn(3, 3, k)
			exact3 := get(t, mx.QuantizedMatmul(x3, wq, sc, bi, true, group, bits))
			got3 := mx.QuantizedMatmulA8(x3, wq, sc, bi, group, bits)
			if !mx.HasQuantizedA8Rows(x3.Backend(), bits) {
				expect(t, "quantized_matmul_a8 of three rows", got3, []int{3, n}, exact3, 0, 0)
				continue
			}
			// Many rows: each within the rounding of its blocks of 32, and alone: two of the
			// rows by themselves give their results bit for bit.
			x3v, g3 := get(t, x3), get(t, got3)
			for r := range 3 {
				amax := make([]float64, k/32)
				for j := range k {
					amax[j/32] = math.Max(amax[j/32], math.Abs(x3v[r*k+j]))
				}
				for i := range n {
					var bound, mag float64
					for j := range k {
						sq := math.Abs(scv[i*(k/group)+j/group] * q[i*k+j])
						bound += sq * amax[j/32] / 254
						mag += sq * math.Abs(x3v[r*k+j])
					}
					if d := math.Abs(g3[r*n+i] - exact3[r*n+i]); d > bound+1e-5*mag+1e-6 {
						t.Fatalf("%d-bit group %d, three rows: out[%d][%d] = %g, exact %g: off by %g, past the rounding bound %g", bits, group, r, i, g3[r*n+i], exact3[r*n+i], d, bound)
					}
				}
			}
			expect(t, "quantized_matmul_a8 of two of the three rows", mx.QuantizedMatmulA8(mx.SliceAxis(x3, 0, 1, 3), wq, sc, bi, group, bits), []int{2, n}, g3[n:], 0, 0)
		}
	}
	wq, sc, bi := mx.Quantize(s.randn(5, 8, 64), 64, 4)
	if bad := mx.QuantizedMatmulA8(s.randn(6, 1, 32), wq, sc, bi, 64, 4); bad.Err() == nil {
		t.Errorf("x of 32 values against weights of 64 gave %s", bad)
	}
	if bad := mx.QuantizedMatmulA8(nil, wq, sc, bi, 64, 4); bad.Err() == nil {
		t.Errorf("a nil x gave %s", bad)
	}
	// Traced, it is the exact product and differentiable.
	grad := func(f func(x *mx.Array) *mx.Array) []float64 {
		_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(f(p[0]), nil, false)} }, []*mx.Array{s.randn(8, 1, 64)})
		if err != nil {
			t.Fatal(err)
		}
		return get(t, g[0])
	}
	want := grad(func(x *mx.Array) *mx.Array { return mx.QuantizedMatmul(x, wq, sc, bi, true, 64, 4) })
	got := grad(func(x *mx.Array) *mx.Array { return mx.QuantizedMatmulA8(x, wq, sc, bi, 64, 4) })
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("quantized_matmul_a8 gradient [%d] = %g, QuantizedMatmul's %g", i, got[i], want[i])
		}
	}
}

// quantizedMany: QuantizedMatmuls gives each matrix what QuantizedMatmul (or, with
// a8, QuantizedMatmulA8) gives it alone, bit for bit, for one and three rows of x
// (decoding and a short prompt; at forty rows, within float32 rounding): sets of
// q/k/v-like widths, scales in float32 and in compact bfloat16, one set mixing the
// two, x in float32 and bfloat16. A traced x takes the ops one by one, with their
// gradient, and a matrix of the wrong width gives its own error.
func (s *suite) quantizedMany(t *testing.T) {
	const k = 640
	for _, bits := range []int{4, 8} {
		var ws, half []mx.QuantizedMatrix
		for i, n := range []int{40, 20, 20} {
			wq, sc, bi := mx.Quantize(s.randn(uint64(200+10*bits+i), n, k), 64, bits)
			ws = append(ws, mx.QuantizedMatrix{W: wq, Scales: sc, Biases: bi})
			hs, hb := mx.Compact(mx.AsType(sc, mx.BFloat16)), mx.Compact(mx.AsType(bi, mx.BFloat16))
			half = append(half, mx.QuantizedMatrix{W: wq, Scales: hs, Biases: hb})
		}
		mixed := []mx.QuantizedMatrix{ws[0], half[1], ws[2]}
		for name, set := range map[string][]mx.QuantizedMatrix{"float32 scales": ws, "bfloat16 scales": half, "mixed scales": mixed} {
			for _, shape := range [][]int{{1, k}, {1, 1, k}, {1, 3, k}, {40, k}} {
				for _, dt := range []mx.DType{mx.Float32, mx.BFloat16} {
					x := mx.AsType(s.randn(uint64(len(shape)+shape[len(shape)-2]), shape...), dt)
					for _, a8 := range []bool{false, true} {
						got := mx.QuantizedMatmuls(x, set, 64, bits, a8)
						for i, w := range set {
							want := mx.QuantizedMatmul(x, w.W, w.Scales, w.Biases, true, 64, bits)
							if a8 {
								want = mx.QuantizedMatmulA8(x, w.W, w.Scales, w.Biases, 64, bits)
							}
							label := fmt.Sprintf("%d-bit, %s, x %v %s, a8 %v, matrix %d", bits, name, shape, dt, a8, i)
							if got[i].DType() != dt {
								t.Fatalf("%s: dtype %s", label, got[i].DType())
							}
							tol := 0.0
							if shape[len(shape)-2] > 4 {
								tol = 1e-5
							}
							expect(t, label, got[i], want.Shape(), get(t, want), tol, tol)
						}
					}
				}
			}
		}
	}
	// Traced, each is QuantizedMatmul and the gradient is theirs.
	wq, sc, bi := mx.Quantize(s.randn(5, 8, 64), 64, 4)
	wq2, sc2, bi2 := mx.Quantize(s.randn(6, 4, 64), 64, 4)
	set := []mx.QuantizedMatrix{{W: wq, Scales: sc, Biases: bi}, {W: wq2, Scales: sc2, Biases: bi2}}
	grad := func(f func(x *mx.Array) *mx.Array) []float64 {
		_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(f(p[0]), nil, false)} }, []*mx.Array{s.randn(8, 1, 64)})
		if err != nil {
			t.Fatal(err)
		}
		return get(t, g[0])
	}
	want := grad(func(x *mx.Array) *mx.Array {
		return mx.Add(mx.Sum(mx.QuantizedMatmul(x, wq, sc, bi, true, 64, 4), nil, false), mx.Sum(mx.QuantizedMatmul(x, wq2, sc2, bi2, true, 64, 4), nil, false))
	})
	got := grad(func(x *mx.Array) *mx.Array {
		ys := mx.QuantizedMatmuls(x, set, 64, 4, true)
		return mx.Add(mx.Sum(ys[0], nil, false), mx.Sum(ys[1], nil, false))
	})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("quantized_matmuls gradient [%d] = %g, QuantizedMatmul's %g", i, got[i], want[i])
		}
	}
	wide, ws, wb := mx.Quantize(s.randn(7, 4, 128), 64, 4)
	ys := mx.QuantizedMatmuls(s.randn(9, 1, 64), append(set, mx.QuantizedMatrix{W: wide, Scales: ws, Biases: wb}), 64, 4, false)
	if ys[0].Err() != nil || ys[1].Err() != nil || ys[2].Err() == nil {
		t.Errorf("a matrix of 128 columns against x of 64 gave errors %v, %v, %v", ys[0].Err(), ys[1].Err(), ys[2].Err())
	}
	for _, y := range mx.QuantizedMatmuls(nil, set, 64, 4, false) {
		if y.Err() == nil {
			t.Errorf("a nil x gave no error")
		}
	}
}
