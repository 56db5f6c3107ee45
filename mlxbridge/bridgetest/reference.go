package bridgetest

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// reference checks ops on random inputs against plain float64 loops written here.
func (s *suite) reference(t *testing.T) {
	const atol, rtol = 1e-4, 1e-4

	// Batched matmul with broadcast batch axes and every transpose combination.
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		ash, bsh := []int{2, 1, 3, 4}, []int{3, 4, 5}
		if tr[0] {
			ash = []int{2, 1, 4, 3}
		}
		if tr[1] {
			bsh = []int{3, 5, 4}
		}
		a, b := s.randn(1, ash...), s.randn(2, bsh...)
		av, bv := get(t, a), get(t, b)
		want := make([]float64, 2*3*3*5)
		for p := 0; p < 2; p++ {
			for q := 0; q < 3; q++ {
				for i := 0; i < 3; i++ {
					for j := 0; j < 5; j++ {
						var sum float64
						for k := 0; k < 4; k++ {
							ai := p*12 + i*4 + k
							if tr[0] {
								ai = p*12 + k*3 + i
							}
							bi := q*20 + k*5 + j
							if tr[1] {
								bi = q*20 + j*4 + k
							}
							sum += av[ai] * bv[bi]
						}
						want[((p*3+q)*3+i)*5+j] = sum
					}
				}
			}
		}
		expect(t, "matmul batched", mx.MatmulT(a, b, tr[0], tr[1]), []int{2, 3, 3, 5}, want, atol, rtol)
	}
	// The Linear layer's folded path: (B, L, K) @ (N, K)ᵀ.
	x, w := s.randn(3, 2, 3, 8), s.randn(4, 6, 8)
	xv, wv := get(t, x), get(t, w)
	want := make([]float64, 2*3*6)
	for r := 0; r < 6; r++ {
		for j := 0; j < 6; j++ {
			for k := 0; k < 8; k++ {
				want[r*6+j] += xv[r*8+k] * wv[j*8+k]
			}
		}
	}
	expect(t, "linear", mx.MatmulT(x, w, false, true), []int{2, 3, 6}, want, atol, rtol)

	// One row (decode) against both weight layouts, with a batch of one in front.
	row, wk, wn := s.randn(31, 1, 1, 8), s.randn(32, 8, 6), s.randn(33, 6, 8)
	rv, wkv, wnv := get(t, row), get(t, wk), get(t, wn)
	want1, want2 := make([]float64, 6), make([]float64, 6)
	for j := 0; j < 6; j++ {
		for k := 0; k < 8; k++ {
			want1[j] += rv[k] * wkv[k*6+j]
			want2[j] += rv[k] * wnv[j*8+k]
		}
	}
	expect(t, "row @ w", mx.Matmul(row, wk), []int{1, 1, 6}, want1, atol, rtol)
	expect(t, "row @ wᵀ", mx.MatmulT(row, wn, false, true), []int{1, 1, 6}, want2, atol, rtol)

	// Softmax along a middle axis, and sums over two separated axes.
	x = s.randn(5, 2, 3, 4)
	xv = get(t, x)
	want = make([]float64, 24)
	for a := 0; a < 2; a++ {
		for c := 0; c < 4; c++ {
			var m, z float64 = math.Inf(-1), 0
			for b := 0; b < 3; b++ {
				m = math.Max(m, xv[a*12+b*4+c])
			}
			for b := 0; b < 3; b++ {
				z += math.Exp(xv[a*12+b*4+c] - m)
			}
			for b := 0; b < 3; b++ {
				want[a*12+b*4+c] = math.Exp(xv[a*12+b*4+c]-m) / z
			}
		}
	}
	expect(t, "softmax axis 1", mx.Softmax(x, 1), []int{2, 3, 4}, want, atol, rtol)
	want = make([]float64, 3)
	for a := 0; a < 2; a++ {
		for b := 0; b < 3; b++ {
			for c := 0; c < 4; c++ {
				want[b] += xv[a*12+b*4+c]
			}
		}
	}
	expect(t, "sum axes 0,2", mx.Sum(x, []int{0, 2}, false), []int{3}, want, atol, rtol)
	want = make([]float64, 4)
	for c := range want {
		want[c] = math.Inf(-1)
		for r := 0; r < 6; r++ {
			want[c] = math.Max(want[c], xv[r*4+c])
		}
	}
	expect(t, "max axes 0,1", mx.Max(x, []int{0, 1}, false), []int{4}, want, 0, 0)
	perm := mx.Transpose(x, 2, 0, 1)
	want = make([]float64, 24)
	for a := 0; a < 2; a++ {
		for b := 0; b < 3; b++ {
			for c := 0; c < 4; c++ {
				want[c*6+a*3+b] = xv[a*12+b*4+c]
			}
		}
	}
	expect(t, "transpose 3-d", perm, []int{4, 2, 3}, want, 0, 0)

	// RMSNorm over rows.
	x, w = s.randn(6, 3, 8), s.randn(7, 8)
	xv, wv = get(t, x), get(t, w)
	want = make([]float64, 24)
	for r := 0; r < 3; r++ {
		var ss float64
		for i := 0; i < 8; i++ {
			ss += xv[r*8+i] * xv[r*8+i]
		}
		inv := 1 / math.Sqrt(ss/8+1e-5)
		for i := 0; i < 8; i++ {
			want[r*8+i] = xv[r*8+i] * inv * wv[i]
		}
	}
	expect(t, "rms_norm", mx.RMSNorm(x, w, 1e-5), []int{3, 8}, want, atol, rtol)

	// RoPE in both layouts, rotating part of the features, with an offset.
	for _, trad := range []bool{false, true} {
		x = s.randn(8, 2, 3, 8)
		xv = get(t, x)
		o := mx.RoPEOptions{Dims: 6, Traditional: trad, Base: 10000, Scale: 0.5, Offset: 5}
		want = ropeRef(xv, 2, 3, 8, o)
		expect(t, "rope", mx.RoPE(x, o), []int{2, 3, 8}, want, atol, rtol)
		// The same turn given as explicit periods Base^(2i/Dims), as llama3's are.
		periods := make([]float32, 3)
		for i := range periods {
			periods[i] = float32(math.Pow(10000, 2*float64(i)/6))
		}
		of := o
		of.Base, of.Freqs = 0, s.arr(periods, 3)
		expect(t, "rope freqs", mx.RoPE(x, of), []int{2, 3, 8}, want, atol, rtol)
		inv := of
		inv.Inverse = true
		expect(t, "rope freqs inverse", mx.RoPE(mx.RoPE(x, of), inv), []int{2, 3, 8}, xv, atol, rtol)
	}

	// Attention with grouped heads, an offset causal mask and an additive mask.
	q, k, v := s.randn(9, 2, 4, 3, 5), s.randn(10, 2, 2, 6, 5), s.randn(11, 2, 2, 6, 3)
	mask := s.randn(12, 1, 1, 3, 6)
	for _, causal := range []bool{false, true} {
		for _, m := range []*mx.Array{nil, mask} {
			want := sdpaRef(get(t, q), get(t, k), get(t, v), m, t, 2, 4, 2, 3, 6, 5, 3, 0.4, causal)
			expect(t, "sdpa", mx.ScaledDotProductAttention(q, k, v, 0.4, causal, m), []int{2, 4, 3, 3}, want, atol, rtol)
		}
	}
	// A prompt's causal attention, long enough for the cpu backend to go a block of rows
	// at a time, the last block short, after 20 cached positions.
	q, k, v = s.randn(13, 1, 4, 150, 16), s.randn(14, 1, 2, 170, 16), s.randn(15, 1, 2, 170, 8)
	want = sdpaRef(get(t, q), get(t, k), get(t, v), nil, t, 1, 4, 2, 150, 170, 16, 8, 0.25, true)
	expect(t, "sdpa causal, 150 rows", mx.ScaledDotProductAttention(q, k, v, 0.25, true, nil), []int{1, 4, 150, 8}, want, atol, rtol)

	// Attention over keys in parts: the reference over the joined keys, for
	// one and two query rows, an empty part, head sizes off the 8-lane width,
	// and a long one that the cpu kernel splits across cores.
	for _, c := range []struct {
		b, hq, hkv, l, d, dv int
		parts                []int
	}{
		{2, 4, 2, 1, 5, 3, []int{4, 0, 3}},
		{1, 6, 2, 2, 12, 9, []int{7, 2}},
		{1, 4, 2, 1, 16, 16, []int{1900, 100, 1}},
		// Decode's shapes (Qwen3's and SmolLM2's heads: two and three query rows a
		// kv head), one row a head, four, head sizes past a multiple of 16, and
		// 80 rows (more than the cpu kernels lay out for 16-bit keys).
		{1, 16, 8, 1, 128, 128, []int{300, 16}},
		{1, 9, 3, 1, 64, 64, []int{200, 7}},
		{1, 2, 2, 1, 32, 32, []int{45}},
		{1, 4, 1, 1, 24, 20, []int{33, 2}},
		{1, 2, 1, 40, 16, 16, []int{50, 30}},
		{1, 9, 3, 1, 64, 64, []int{600, 300, 7}}, // long enough for the cpu kernels to cut 3 heads' positions over 2 cores
	} {
		sl := 0
		for _, n := range c.parts {
			sl += n
		}
		q := s.randn(20, c.b, c.hq, c.l, c.d)
		k, v := s.randn(21, c.b, c.hkv, sl, c.d), s.randn(22, c.b, c.hkv, sl, c.dv)
		var ks, vs []*mx.Array
		at := 0
		for _, n := range c.parts {
			ks, vs = append(ks, mx.SliceAxis(k, 2, at, at+n)), append(vs, mx.SliceAxis(v, 2, at, at+n))
			at += n
		}
		want := sdpaRef(get(t, q), get(t, k), get(t, v), nil, t, c.b, c.hq, c.hkv, c.l, sl, c.d, c.dv, 0.3, true)
		expect(t, fmt.Sprintf("attend parts %v", c.parts), mx.AttendParts(q, ks, vs, 0.3), []int{c.b, c.hq, c.l, c.dv}, want, atol, rtol)

		// The first part held in 16 bits (a 16-bit KV cache), compact where the
		// backend can: the reference over its rounded values.
		for _, dt := range []mx.DType{mx.BFloat16, mx.Float16} {
			hk, hv := mx.Compact(mx.AsType(ks[0], dt)), mx.Compact(mx.AsType(vs[0], dt))
			rk := mx.Concatenate(append([]*mx.Array{mx.AsType(hk, mx.Float32)}, ks[1:]...), 2)
			rv := mx.Concatenate(append([]*mx.Array{mx.AsType(hv, mx.Float32)}, vs[1:]...), 2)
			want := sdpaRef(get(t, q), get(t, rk), get(t, rv), nil, t, c.b, c.hq, c.hkv, c.l, sl, c.d, c.dv, 0.3, true)
			got := mx.AttendParts(q, append([]*mx.Array{hk}, ks[1:]...), append([]*mx.Array{hv}, vs[1:]...), 0.3)
			expect(t, fmt.Sprintf("attend parts %v, first in %s", c.parts, dt), got, []int{c.b, c.hq, c.l, c.dv}, want, atol, rtol)
		}
	}

	// Attention over a quantized first part and exact parts: the reference over
	// the dequantized keys and values (Dequantize's own numbers) joined with the
	// exact ones, for 2, 4 and 8 bits, a head padded to the group size, one and
	// two query rows, and no exact part at all.
	for _, c := range []struct {
		hq, hkv, l, d, group, bits, s0 int
		parts                          []int
	}{
		{4, 2, 1, 64, 64, 8, 40, []int{3}},
		{4, 2, 2, 48, 32, 4, 37, []int{5, 2}},
		{6, 3, 1, 32, 32, 2, 9, nil},
		{2, 1, 1, 64, 32, 4, 1300, []int{7}},
		{3, 1, 1, 20, 32, 8, 50, []int{4}},       // a head off the 8-lane width
		{3, 1, 1, 20, 32, 4, 50, []int{4}},       // the same at 4 bits
		{16, 8, 1, 128, 64, 4, 100, []int{5}},    // Qwen3's heads
		{16, 8, 1, 128, 64, 8, 70, []int{16, 1}}, // with its 8-bit cache
	} {
		sl := c.s0
		for _, n := range c.parts {
			sl += n
		}
		dp := (c.d + c.group - 1) / c.group * c.group
		q := s.randn(30, 1, c.hq, c.l, c.d)
		k, v := s.randn(31, 1, c.hkv, sl, c.d), s.randn(32, 1, c.hkv, sl, c.d)
		pad := func(x *mx.Array) *mx.Array {
			if dp == c.d {
				return x
			}
			return mx.Concatenate([]*mx.Array{x, mx.Full(s.b, []int{1, c.hkv, c.s0, dp - c.d}, 0, mx.Float32)}, -1)
		}
		quantized := func(x *mx.Array) (mx.QuantizedKV, *mx.Array) {
			w, sc, b := mx.Quantize(pad(mx.SliceAxis(x, 2, 0, c.s0)), c.group, c.bits)
			return mx.QuantizedKV{W: w, Scales: sc, Biases: b}, mx.SliceAxis(mx.Dequantize(w, sc, b, c.group, c.bits), -1, 0, c.d)
		}
		kq, kd := quantized(k)
		vq, vd := quantized(v)
		var ks, vs []*mx.Array
		at := c.s0
		for _, n := range c.parts {
			ks, vs = append(ks, mx.SliceAxis(k, 2, at, at+n)), append(vs, mx.SliceAxis(v, 2, at, at+n))
			at += n
		}
		kj, vj := mx.Concatenate(append([]*mx.Array{kd}, ks...), 2), mx.Concatenate(append([]*mx.Array{vd}, vs...), 2)
		want := sdpaRef(get(t, q), get(t, kj), get(t, vj), nil, t, 1, c.hq, c.hkv, c.l, sl, c.d, c.d, 0.3, true)
		got := mx.AttendQuantized(q, kq, vq, c.group, c.bits, ks, vs, 0.3)
		expect(t, fmt.Sprintf("attend quantized %d bits, head %d in groups of %d, parts %d+%v", c.bits, c.d, c.group, c.s0, c.parts), got, []int{1, c.hq, c.l, c.d}, want, atol, rtol)
	}

	// Cross entropy, per position and masked mean.
	logits := s.randn(13, 2, 3, 7)
	tg := s.ints([]int32{0, 6, 3, 2, 2, 5}, 2, 3)
	lv := get(t, logits)
	ce := make([]float64, 6)
	for r, c := range []int{0, 6, 3, 2, 2, 5} {
		row := lv[r*7 : r*7+7]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var z float64
		for _, v := range row {
			z += math.Exp(v - m)
		}
		ce[r] = math.Log(z) + m - row[c]
	}
	expect(t, "cross_entropy", mx.CrossEntropy(logits, tg), []int{2, 3}, ce, atol, rtol)
	mk := s.arr([]float32{1, 1, 0, 0, 1, 1}, 2, 3)
	expect(t, "cross_entropy masked", mx.CrossEntropyMasked(logits, tg, mk), []int{}, []float64{(ce[0] + ce[1] + ce[4] + ce[5]) / 4}, atol, rtol)
}

func ropeRef(x []float64, rowsOuter, l, d int, o mx.RoPEOptions) []float64 {
	out := append([]float64(nil), x...)
	half := o.Dims / 2
	for r := 0; r < rowsOuter*l; r++ {
		pos := float64(o.Offset+r%l) * float64(o.Scale)
		for i := 0; i < half; i++ {
			th := pos * math.Pow(float64(o.Base), -2*float64(i)/float64(o.Dims))
			i1, i2 := r*d+i, r*d+i+half
			if o.Traditional {
				i1, i2 = r*d+2*i, r*d+2*i+1
			}
			out[i1] = x[i1]*math.Cos(th) - x[i2]*math.Sin(th)
			out[i2] = x[i1]*math.Sin(th) + x[i2]*math.Cos(th)
		}
	}
	return out
}

func sdpaRef(q, k, v []float64, mask *mx.Array, t *testing.T, b, hq, hkv, l, sl, d, dv int, scale float64, causal bool) []float64 {
	var mv []float64
	if mask != nil {
		mv = get(t, mask) // (1,1,L,S)
	}
	out := make([]float64, b*hq*l*dv)
	for bi := 0; bi < b; bi++ {
		for h := 0; h < hq; h++ {
			kh := h / (hq / hkv)
			for i := 0; i < l; i++ {
				sc := make([]float64, sl)
				m := math.Inf(-1)
				for j := 0; j < sl; j++ {
					var dot float64
					for e := 0; e < d; e++ {
						dot += q[((bi*hq+h)*l+i)*d+e] * k[((bi*hkv+kh)*sl+j)*d+e]
					}
					sc[j] = dot * scale
					if mv != nil {
						sc[j] += mv[i*sl+j]
					}
					if causal && j > i+sl-l {
						sc[j] = math.Inf(-1)
					}
					m = math.Max(m, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - m)
					z += sc[j]
				}
				for e := 0; e < dv; e++ {
					var acc float64
					for j := range sc {
						acc += sc[j] / z * v[((bi*hkv+kh)*sl+j)*dv+e]
					}
					out[((bi*hq+h)*l+i)*dv+e] = acc
				}
			}
		}
	}
	return out
}

// lowRank checks AddLowRank, y + scale·(x·a)·b, against float64 sums: one row
// and a few (where a backend may fuse it), more rows, ranks below, at and past
// eight and not a multiple of it, inner sizes off a multiple of four, and an
// output of one broadcast over the rows.
func (s *suite) lowRank(t *testing.T) {
	cases := []struct{ rows, k, r, n int }{
		{1, 576, 8, 1536}, {1, 7, 1, 3}, {1, 1, 8, 1}, {3, 13, 5, 9}, {2, 30, 16, 17},
		{8, 9, 21, 33}, {1, 64, 64, 40}, {9, 10, 8, 11}, {40, 12, 3, 6},
	}
	for i, c := range cases {
		name := fmt.Sprintf("add_low_rank %d×%d r%d →%d", c.rows, c.k, c.r, c.n)
		seed := uint64(300 + 4*i)
		x, y := s.randn(seed, 1, c.rows, c.k), s.randn(seed+1, 1, c.rows, c.n)
		a, b := s.randn(seed+2, c.k, c.r), s.randn(seed+3, c.r, c.n)
		xv, yv, av, bv := get(t, x), get(t, y), get(t, a), get(t, b)
		const scale = 0.75
		want := make([]float64, c.rows*c.n)
		for row := range c.rows {
			for o := range c.n {
				var sum float64
				for j := range c.r {
					var xa float64
					for p := range c.k {
						xa += xv[row*c.k+p] * av[p*c.r+j]
					}
					sum += xa * bv[j*c.n+o]
				}
				want[row*c.n+o] = yv[row*c.n+o] + scale*sum
			}
		}
		expect(t, name, mx.AddLowRank(y, x, a, b, scale), []int{1, c.rows, c.n}, want, 1e-4, 1e-4)
		// y broadcast over the rows: the composed ops on every backend.
		y1 := mx.Slice(y, []int{0, 0, 0}, []int{1, 1, c.n})
		for row := range c.rows {
			for o := range c.n {
				want[row*c.n+o] += yv[o] - yv[row*c.n+o]
			}
		}
		expect(t, name+" broadcast y", mx.AddLowRank(y1, x, a, b, scale), []int{1, c.rows, c.n}, want, 1e-4, 1e-4)
	}
	// A wrong shape is an error, not a fused guess.
	if err := mx.AddLowRank(s.randn(1, 1, 4), s.randn(2, 1, 3), s.randn(3, 4, 2), s.randn(4, 2, 4), 1).Err(); err == nil {
		t.Error("add_low_rank with x 3 wide and a 4 tall: no error")
	}
}
