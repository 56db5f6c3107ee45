package cpu_test

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/bridgetest"
	"github.com/inloop/inloop/mlxbridge/cpu"
)

func TestConformance(t *testing.T) { bridgetest.Run(t, cpu.New()) }

// plain hides the cpu backend's fused kernels, so the suite also checks the ops
// mlxbridge composes for backends that lack them.
type plain struct{ mx.Backend }

func TestConformanceComposed(t *testing.T) { bridgetest.Run(t, plain{cpu.New()}) }

// RoPE keeps its last angle tables: calls that alternate positions, lengths, bases,
// scales, directions and explicit periods each get their own angles, as the composed
// op computes them.
func TestRoPEMemo(t *testing.T) {
	fused, composed := cpu.New(), plain{cpu.New()}
	periods := []float32{1, 10, 100, 1000}
	data := make([]float32, 2*3*4*8)
	for i := range data {
		data[i] = float32(i%13)/6 - 1
	}
	x := mx.FromData(fused, mx.Float32, data, 2, 3, 4, 8)
	xc := mx.FromData(composed, mx.Float32, data, 2, 3, 4, 8)
	cases := []mx.RoPEOptions{
		{Dims: 8, Base: 10000, Scale: 1, Offset: 7},
		{Dims: 8, Base: 10000, Scale: 1, Offset: 7},
		{Dims: 8, Base: 10000, Scale: 1, Offset: 3},
		{Dims: 8, Base: 1e6, Scale: 1, Offset: 3},
		{Dims: 8, Base: 1e6, Scale: 0.5, Offset: 3},
		{Dims: 6, Base: 1e6, Scale: 0.5, Offset: 3},
		{Dims: 6, Base: 1e6, Scale: 0.5, Offset: 3, Inverse: true},
		{Dims: 8, Scale: 1, Offset: 3, Freqs: mx.FromData(fused, mx.Float32, periods, 4)},
		{Dims: 8, Scale: 1, Offset: 3, Freqs: mx.FromData(fused, mx.Float32, []float32{2, 20, 200, 2000}, 4)},
	}
	for i, o := range cases {
		for _, rows := range []int{1, 4, 1} {
			xs, xcs := mx.SliceAxis(x, 2, 0, rows), mx.SliceAxis(xc, 2, 0, rows)
			oc := o
			if o.Freqs != nil {
				oc.Freqs = mx.FromData(composed, mx.Float32, must(t, o.Freqs), 4)
			}
			got, want := must(t, mx.RoPE(xs, o)), must(t, mx.RoPE(xcs, oc))
			for j := range want {
				if d := got[j] - want[j]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("case %d, %d rows: value %d is %g, composed %g", i, rows, j, got[j], want[j])
				}
			}
		}
	}
}

func must(t *testing.T, a *mx.Array) []float32 {
	t.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
