//go:build cgo && (darwin || linux)

package mlx

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// On the CPU device RoPE of a (B, H, L, D) array rotates with rows of a table of
// angles (rope.go); a 3-axis array still takes fast.rope, whose CPU fallback
// computes the angles every call. The two give the same bits, at offsets inside the
// first table and past it (the table grows), in float32 and bfloat16, forward and
// inverse, with one position (decoding) and many (prefill).
func TestRoPETableMatchesFastRoPE(t *testing.T) {
	be := openOrSkip(t)
	if be.gpu {
		t.Skip("fast.rope is used as it is on a GPU")
	}
	for _, c := range []struct {
		H, L, D, offset int
		base, scale     float32
		dt              mx.DType
		inverse         bool
	}{
		{4, 1, 64, 0, 10000, 1, mx.Float32, false},
		{4, 1, 64, 17, 10000, 1, mx.Float32, false},
		{2, 33, 128, 1000, 1e6, 1, mx.Float32, false},   // rows across the first table's end
		{2, 1, 128, 5000, 1e6, 1, mx.Float32, false},    // a grown table
		{3, 7, 64, 40, 10000, 0.25, mx.BFloat16, false}, // scaled positions, 16-bit activations
		{3, 5, 64, 9, 10000, 1, mx.Float32, true},       // the inverse rotation (gradients)
	} {
		name := fmt.Sprintf("H=%d L=%d D=%d offset=%d %s inverse=%v", c.H, c.L, c.D, c.offset, c.dt, c.inverse)
		x := mx.AsType(randn(be, uint64(c.L+c.offset), 1, c.H, c.L, c.D), c.dt)
		o := mx.RoPEOptions{Dims: c.D, Base: c.base, Scale: c.scale, Offset: c.offset, Inverse: c.inverse}
		table := mx.RoPE(x, o)
		fast := mx.Reshape(mx.RoPE(mx.Reshape(x, c.H, c.L, c.D), o), 1, c.H, c.L, c.D)
		got, err := mx.AsType(table, mx.Float32).Float32s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := mx.AsType(fast, mx.Float32).Float32s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: element %d is %g from the table, %g from fast.rope", name, i, got[i], want[i])
			}
		}
	}
}
