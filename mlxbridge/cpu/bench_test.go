package cpu

import (
	"fmt"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Benchmarks report GFLOP/s (as "MB/s" ÷ 1000 would mislead, they use ReportMetric)
// so the bridge can be compared with raw cblas in the same run.

func randArray(b mx.Backend, seed uint64, shape ...int) *mx.Array {
	mx.SetDefault(b)
	return mx.RandomNormal(seed, shape...)
}

func BenchmarkSgemmRaw1024(b *testing.B) {
	const n = 1024
	a, c, out := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], c[i] = float32(i%7), float32(i%5)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sgemm(false, false, n, n, n, a, n, c, n, 0, out, n)
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkMatmulBridge1024(b *testing.B) {
	be := New()
	x, y := randArray(be, 1, 1024, 1024), randArray(be, 2, 1024, 1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := mx.Eval(mx.Matmul(x, y)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*1024*1024*1024*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// Attention at sequence 512 with SmolLM2-135M's head layout (9 query heads, 3 kv
// heads, head dim 64), causal, through the fused kernel and the composed ops.
func benchAttention(b *testing.B, be mx.Backend) {
	const hq, hkv, l, d = 9, 3, 512, 64
	q, k, v := randArray(be, 1, 1, hq, l, d), randArray(be, 2, 1, hkv, l, d), randArray(be, 3, 1, hkv, l, d)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := mx.Eval(mx.ScaledDotProductAttention(q, k, v, 0.125, true, nil)); err != nil {
			b.Fatal(err)
		}
	}
	// Both matmuls over the full square (the kernels do not skip masked blocks).
	b.ReportMetric(2*2*hq*l*l*d*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

type composedOnly struct{ mx.Backend }

func BenchmarkAttention512Fused(b *testing.B)    { benchAttention(b, New()) }
func BenchmarkAttention512Composed(b *testing.B) { benchAttention(b, composedOnly{New()}) }

// Attention backward (what training pays): the composed graph differentiated.
func BenchmarkAttention512Backward(b *testing.B) {
	be := New()
	const hq, hkv, l, d = 9, 3, 512, 64
	q, k, v := randArray(be, 1, 1, hq, l, d), randArray(be, 2, 1, hkv, l, d), randArray(be, 3, 1, hkv, l, d)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			return []*mx.Array{mx.Sum(mx.ScaledDotProductAttention(p[0], p[1], p[2], 0.125, true, nil), nil, false)}
		}, []*mx.Array{q, k, v})
		if err != nil || mx.Eval(g...) != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	be := New()
	x, w := randArray(be, 1, 512, 2048), randArray(be, 2, 2048)
	b.SetBytes(512 * 2048 * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := mx.Eval(mx.RMSNorm(x, w, 1e-5)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBinary is the elementwise arithmetic of a training step on a 512-token row's
// activations (512 × 1024 floats, in cache): added elementwise, scaled by a scalar and
// multiplied by a row broadcast.
func BenchmarkBinary(b *testing.B) {
	be := New()
	x, y := randArray(be, 1, 512, 1024), randArray(be, 2, 512, 1024)
	s, row := randArray(be, 3), randArray(be, 4, 512, 1)
	for name, f := range map[string]func() *mx.Array{
		"add":       func() *mx.Array { return mx.Add(x, y) },
		"scalar":    func() *mx.Array { return mx.Mul(x, s) },
		"broadcast": func() *mx.Array { return mx.Mul(x, row) },
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(512 * 1024 * 4)
			for b.Loop() {
				if err := mx.Eval(f()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSoftmax(b *testing.B) {
	be := New()
	x := randArray(be, 1, 512, 32000)
	b.SetBytes(512 * 32000 * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := mx.Eval(mx.Softmax(x, -1)); err != nil {
			b.Fatal(err)
		}
	}
}

// Quantized matvec (decode) through the bridge, in GB/s of packed weights, scales
// and biases streamed; compare with BenchmarkMemRead in internal/qmm.
func BenchmarkQuantizedMatvec(b *testing.B) {
	be := New()
	for _, bits := range []int{4, 8} {
		for _, s := range [][2]int{{4096, 4096}, {11008, 4096}, {4096, 11008}} {
			n, k := s[0], s[1]
			b.Run(fmt.Sprintf("%dbit_%dx%d", bits, n, k), func(b *testing.B) {
				wq, sc, bi := mx.Quantize(randArray(be, 1, n, k), 64, bits)
				x := randArray(be, 2, 1, k)
				b.SetBytes(wq.Nbytes() + sc.Nbytes()*2)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := mx.Eval(mx.QuantizedMatmul(x, wq, sc, bi, true, 64, bits)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A decode step's attention (SmolLM2-135M's heads, one query row) over a cache
// held as a frozen part and a 16-position tail, in one fused pass and composed
// (joined, then the fused SDPA kernel).
func BenchmarkAttendParts(b *testing.B) {
	const hq, hkv, d, tail = 9, 3, 64, 16
	for _, s := range []int{160, 2048} {
		fusedAndComposed(b, fmt.Sprintf("s=%d", s), func(b *testing.B, be mx.Backend) {
			q := randArray(be, 1, 1, hq, 1, d)
			ks := []*mx.Array{randArray(be, 2, 1, hkv, s-tail, d), randArray(be, 3, 1, hkv, tail, d)}
			vs := []*mx.Array{randArray(be, 4, 1, hkv, s-tail, d), randArray(be, 5, 1, hkv, tail, d)}
			for b.Loop() {
				if err := mx.Eval(mx.AttendParts(q, ks, vs, 0.125)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*2*hq*float64(s*d*b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// fusedAndComposed runs f as a sub-benchmark on the cpu backend as it is and with
// its fused kernels hidden.
func fusedAndComposed(b *testing.B, name string, f func(b *testing.B, be mx.Backend)) {
	for _, c := range []struct {
		name string
		be   mx.Backend
	}{{"fused", New()}, {"composed", composedOnly{New()}}} {
		b.Run(name+"/"+c.name, func(b *testing.B) { f(b, c.be) })
	}
}

// The same step over a cache whose frozen part is quantized along the head
// dimension (8 and 4 bits in groups of 64, as --kv-bits keeps it), fused and
// composed (the part dequantized, then joined).
func BenchmarkAttendQuantized(b *testing.B) {
	const hq, hkv, d, tail, s = 9, 3, 64, 16, 2048
	for _, bits := range []int{8, 4} {
		fusedAndComposed(b, fmt.Sprintf("bits=%d", bits), func(b *testing.B, be mx.Backend) {
			q := randArray(be, 1, 1, hq, 1, d)
			kw, ks, kb := mx.Quantize(randArray(be, 2, 1, hkv, s-tail, d), 64, bits)
			vw, vs, vb := mx.Quantize(randArray(be, 3, 1, hkv, s-tail, d), 64, bits)
			k0, v0 := mx.QuantizedKV{W: kw, Scales: ks, Biases: kb}, mx.QuantizedKV{W: vw, Scales: vs, Biases: vb}
			k1, v1 := randArray(be, 4, 1, hkv, tail, d), randArray(be, 5, 1, hkv, tail, d)
			for b.Loop() {
				if err := mx.Eval(mx.AttendQuantized(q, k0, v0, 64, bits, []*mx.Array{k1}, []*mx.Array{v1}, 0.125)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAttendLayers is a decode step's attention over 28 layers' caches at 2,048
// positions with Qwen3-0.6B's heads: the frozen part in float32 and in bfloat16 (a
// 16-bit cache, compact), streamed from memory as in decoding (a layer after another)
// and hot (one layer over and over, its cache in L3). GB/s counts the frozen keys and
// values read.
func BenchmarkAttendLayers(b *testing.B) {
	const hq, hkv, d, tail, s, layers = 16, 8, 128, 16, 2048, 28
	be := New()
	for _, dt := range []mx.DType{mx.Float32, mx.BFloat16} {
		q := randArray(be, 1, 1, hq, 1, d)
		type layer struct{ ks, vs []*mx.Array }
		ls := make([]layer, layers)
		for i := range ls {
			k0, v0 := randArray(be, uint64(2*i+2), 1, hkv, s-tail, d), randArray(be, uint64(2*i+3), 1, hkv, s-tail, d)
			if dt == mx.BFloat16 {
				k0, v0 = mx.Compact(mx.AsType(k0, dt)), mx.Compact(mx.AsType(v0, dt))
			}
			ls[i] = layer{[]*mx.Array{k0, randArray(be, 90, 1, hkv, tail, d)}, []*mx.Array{v0, randArray(be, 91, 1, hkv, tail, d)}}
		}
		for _, n := range []int{layers, 1} {
			name := dt.String() + "/streamed"
			if n == 1 {
				name = dt.String() + "/hot"
			}
			b.Run(name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					l := ls[i%n]
					if err := mx.Eval(mx.AttendParts(q, l.ks, l.vs, 0.09)); err != nil {
						b.Fatal(err)
					}
					i++
				}
				bytes := float64(2 * hkv * (s - tail) * d * dt.Size())
				b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkAddLowRank is one decode row's LoRA update on SmolLM2-135M's and
// Qwen3-0.6B's layer shapes, rank 8: the fused op against the four ops it
// replaces (ns/op is per update).
func BenchmarkAddLowRank(b *testing.B) {
	for _, sh := range [][2]int{{576, 576}, {576, 1536}, {1536, 576}, {1024, 3072}} {
		for _, fused := range []bool{true, false} {
			var be mx.Backend = New()
			if !fused {
				be = composedOnly{be}
			}
			b.Run(fmt.Sprintf("%dx%d/fused=%v", sh[0], sh[1], fused), func(b *testing.B) {
				x, y := randArray(be, 1, 1, 1, sh[0]), randArray(be, 2, 1, 1, sh[1])
				la, lb := randArray(be, 3, sh[0], 8), randArray(be, 4, 8, sh[1])
				b.ResetTimer()
				for range b.N {
					if err := mx.Eval(mx.AddLowRank(y, x, la, lb, 2)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
