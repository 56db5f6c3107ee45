//go:build cgo && (darwin || linux)

package mlx

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// BenchmarkOpOverhead is the cost of one lazy op issued from an ordinary
// goroutine: the hand-over to the worker thread, the mlx-c call and the handle.
func BenchmarkOpOverhead(b *testing.B) {
	be := openOrSkip(b)
	x := mx.FromData(be, mx.Float32, []float32{1}, 1)
	for b.Loop() {
		mx.Add(x, x)
	}
}

// BenchmarkOpOverheadRun is the same op issued inside mlxbridge.Run: on the
// worker thread, with no hand-over.
func BenchmarkOpOverheadRun(b *testing.B) {
	be := openOrSkip(b)
	x := mx.FromData(be, mx.Float32, []float32{1}, 1)
	mx.Run(be, func() {
		for b.Loop() {
			mx.Add(x, x)
		}
	})
}

// BenchmarkMatmulEval multiplies two 512×512 matrices and waits for the result.
func BenchmarkMatmulEval(b *testing.B) {
	be := openOrSkip(b)
	x, y := randn(be, 1, 512, 512), randn(be, 2, 512, 512)
	for b.Loop() {
		if err := mx.Eval(mx.Matmul(x, y)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*512*512*512/1e9*float64(b.N)/b.Elapsed().Seconds(), "GFLOP/s")
}
