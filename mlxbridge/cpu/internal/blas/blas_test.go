package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestThreadsUntouchedUntilFirstProduct checks, in a fresh process (this test binary
// again, running only the helper below), that loading the package leaves OpenBLAS's
// thread count as it was, and that the first product makes it single-threaded: another
// library in the process (MLX on Linux) shares it.
func TestThreadsUntouchedUntilFirstProduct(t *testing.T) {
	if os.Getenv("INLOOP_BLAS_HELPER") != "" {
		before := blasThreads()
		Sgemm(false, false, 2, 2, 2, []float32{1, 2, 3, 4}, 2, []float32{1, 0, 0, 1}, 2, 0, make([]float32, 4), 2)
		fmt.Printf("threads %d %d\n", before, blasThreads())
		return
	}
	if blasThreads() < 0 {
		t.Skip("BLAS is Accelerate here: no thread count to keep")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestThreadsUntouchedUntilFirstProduct$")
	cmd.Env = append(os.Environ(), "INLOOP_BLAS_HELPER=1", "OPENBLAS_NUM_THREADS=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var before, after int
	i := strings.Index(string(out), "threads ")
	if i < 0 {
		t.Fatalf("helper printed no thread counts:\n%s", out)
	}
	if _, err := fmt.Sscanf(string(out[i:]), "threads %d %d", &before, &after); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if before != 2 || after != 1 {
		t.Errorf("OpenBLAS threads %d at load and %d after the first product, want 2 (as the environment set it) and 1", before, after)
	}
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// at reads element (i, j) of op(X) for a row-major X with row stride ld.
func at(x []float32, ld int, trans bool, i, j int) float64 {
	if trans {
		return float64(x[j*ld+i])
	}
	return float64(x[i*ld+j])
}

// TestSgemmMatchesNaive checks every transpose combination, padded strides and a
// nonzero beta, on shapes that stay whole and on shapes cut by rows and by columns,
// against a float64 triple loop; the cells of C outside (m, n) must be untouched.
func TestSgemmMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{3, 5, 7}, {1, 1, 1}, {130, 70, 90}, {40, 300, 64}, {300, 33, 65}, {17, 1029, 40}}
	for _, sh := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				m, n, k := sh[0], sh[1], sh[2]
				t.Run(fmt.Sprintf("%dx%dx%d/ta=%v/tb=%v", m, n, k, ta, tb), func(t *testing.T) {
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+3, bc+1, n+5
					a, b := randFloats(r, ar*lda), randFloats(r, br*ldb)
					c := randFloats(r, m*ldc)
					c0 := append([]float32(nil), c...)
					const beta = 0.5
					Sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)
					for i := range m {
						for j := range ldc {
							got := float64(c[i*ldc+j])
							want := float64(c0[i*ldc+j])
							if j < n {
								want *= beta
								for p := range k {
									want += at(a, lda, ta, i, p) * at(b, ldb, tb, p, j)
								}
							}
							if math.Abs(got-want) > 1e-4*(1+math.Abs(want))*math.Sqrt(float64(k)) {
								t.Fatalf("C[%d,%d] = %v, want %v", i, j, got, want)
							}
						}
					}
				})
			}
		}
	}
}

func TestSgemvMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][2]int{{5, 3}, {1000, 300}, {300, 1000}, {2049, 33}} {
		for _, trans := range []bool{false, true} {
			m, n := sh[0], sh[1]
			t.Run(fmt.Sprintf("%dx%d/trans=%v", m, n, trans), func(t *testing.T) {
				lda := n + 2
				a := randFloats(r, m*lda)
				xl, yl := n, m
				if trans {
					xl, yl = m, n
				}
				x, y := randFloats(r, xl), randFloats(r, yl+3)
				y0 := append([]float32(nil), y...)
				const beta = -1
				Sgemv(trans, m, n, a, lda, x, beta, y)
				for i := range yl + 3 {
					want := float64(y0[i])
					if i < yl {
						want *= beta
						for p := range xl {
							if trans {
								want += float64(a[p*lda+i]) * float64(x[p])
							} else {
								want += float64(a[i*lda+p]) * float64(x[p])
							}
						}
					}
					if got := float64(y[i]); math.Abs(got-want) > 1e-4*(1+math.Abs(want))*math.Sqrt(float64(xl)) {
						t.Fatalf("y[%d] = %v, want %v", i, got, want)
					}
				}
			})
		}
	}
}

// BenchmarkSgemm1024 is a 1024³ product, split over the cores here.
func BenchmarkSgemm1024(b *testing.B) {
	const n = 1024
	r := rand.New(rand.NewPCG(5, 6))
	x, y, out := randFloats(r, n*n), randFloats(r, n*n), make([]float32, n*n)
	for b.Loop() {
		Sgemm(false, false, n, n, n, x, n, y, n, 0, out, n)
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cores")
}

// BenchmarkSgemv compares Sgemv cut over package par's workers ("split") with the same
// call handed whole to a BLAS running two threads of its own ("threaded"), at decode's
// shapes: SmolLM2-135M's and Qwen3-0.6B's projections and tied heads. Like decoding, it
// cycles through copies of the matrix that together outgrow the caches. All split runs
// come first: once BLAS's own threads have run, they spin for a while after each call
// and slow whatever runs next.
func BenchmarkSgemv(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := [][2]int{{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}, {1024, 2048}, {3072, 1024}, {1024, 3072}, {151936, 1024}}
	for _, mode := range []string{"split", "threaded"} {
		for _, sh := range shapes {
			m, n := sh[0], sh[1]
			copies := max(1, (128<<20)/(4*m*n))
			as := make([][]float32, copies)
			for i := range as {
				as[i] = randFloats(r, m*n)
			}
			x, y := randFloats(r, n), make([]float32, m)
			b.Run(fmt.Sprintf("%s/%dx%d", mode, m, n), func(b *testing.B) {
				if mode == "threaded" {
					threadedBLAS(2)
					defer threadedBLAS(1)
				}
				i := 0
				for b.Loop() {
					Sgemv(false, m, n, as[i%copies], n, x, 0, y)
					i++
				}
				b.ReportMetric(float64(4*m*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
