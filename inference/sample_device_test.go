package inference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// The device draw picks the host sampler's token from the same stream, for
// every combination of filters (but for the rare draw that rounding puts on
// the other side of a boundary), and gives the token's log-probability.
func TestDeviceDrawMatchesSample(t *testing.T) {
	b := mx.Default()
	opts := []SampleOptions{
		{},
		{Temperature: 0.7, Seed: 1},
		{Temperature: 1, TopK: 40, Seed: 2},
		{Temperature: 0.8, TopP: 0.9, Seed: 3},
		{Temperature: 1.2, MinP: 0.05, Seed: 4},
		{Temperature: 0.9, TopK: 50, TopP: 0.95, MinP: 0.02, Seed: 5},
		{Temperature: 0.05, TopP: 0.5, Seed: 6}, // nearly greedy: the negligible cut matters
		{Temperature: 1, TopK: 1, Seed: 7},
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, o := range opts {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			host, err := NewSampler(o)
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := NewSampler(o)
			ref := rand.New(rand.NewPCG(o.Seed, 0x853c49e6748fea9b)) // the samplers' stream
			misses := 0
			defer func() {
				if misses > 3 {
					t.Errorf("%d of 150 draws differ from the host's: more than rounding explains", misses)
				}
			}()
			for i := range 150 {
				v := 1 + r.IntN(3000)
				row := make([]float32, v)
				scale := 0.5 + 4*r.Float64()
				for j := range row {
					row[j] = float32(scale * r.NormFloat64())
				}
				want := host.Sample(row, nil)
				tok, lp := dev.deviceDraw(mx.FromData(b, mx.Float32, row, v), true)
				got, err := tok.Int32s()
				if err != nil {
					t.Fatal(err)
				}
				if tok.Dim(0) != 1 || tok.Dim(1) != 1 {
					t.Fatalf("token of shape %v, want (1, 1)", tok.Shape())
				}
				k := int(got[0])
				if k != want {
					// Only where the float32 running sum and the host's float64
					// one put the draw on either side of a boundary: the
					// device's token must be one the host kept, and u × the
					// kept mass must fall within rounding of its interval.
					misses++
					u := ref.Float64()
					total := host.weigh(row)
					lo := 0.0
					for _, w := range host.w[:k] {
						lo += w
					}
					x, tol := u*total, 1e-4*total
					if host.w[k] == 0 || x < lo-tol || x > lo+host.w[k]+tol {
						t.Fatalf("draw %d (vocab %d): device token %d (weight %g, interval [%g, %g)), host %d, u×total %g", i, v, k, host.w[k], lo, lo+host.w[k], want, x)
					}
				} else if o.Temperature > 0 {
					ref.Float64()
				}
				l, err := lp.Item()
				if err != nil {
					t.Fatal(err)
				}
				if w := logProb(row, k); math.Abs(float64(l)-w) > 1e-4*max(1, math.Abs(w)) {
					t.Fatalf("draw %d: log p %v, want %v", i, l, w)
				}
			}
		})
	}
}
