//go:build cgo && (darwin || linux)

package mlx

import (
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/bridgetest"
)

// openOrSkip opens the backend, or skips the test with one line saying why.
func openOrSkip(t testing.TB) *Backend {
	t.Helper()
	be, err := Open()
	if err != nil {
		t.Skipf("%v", err)
	}
	return be
}

func TestConformance(t *testing.T) {
	be := openOrSkip(t)
	t.Log(be.Describe())
	bridgetest.Run(t, be)
}

// randn is a float32 array of normal values drawn from seed.
func randn(b mx.Backend, seed uint64, shape ...int) *mx.Array {
	r := rand.New(rand.NewPCG(seed, 11))
	v := make([]float32, numel(shape))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return mx.FromData(b, mx.Float32, v, shape...)
}
