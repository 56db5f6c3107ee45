package cpu

import (
	"runtime"
	"testing"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Recycled buffers must never back a live array: keep some results, churn through
// many dead ones of the same size, collect, and check the kept values are intact.
func TestPoolNeverRecyclesLiveBuffers(t *testing.T) {
	be := New()
	n := poolMin * 2
	x := mx.FromData(be, mx.Float32, make([]float32, n), n)
	keep := []*mx.Array{mx.Exp(x), mx.AddScalar(x, 3), mx.Matmul(mx.Reshape(x, 256, n/256), mx.Full(be, []int{n / 256, 512}, 1, mx.Float32))}
	want := []float32{1, 3, 0}
	recycled := false
	for round := 0; round < 20; round++ {
		for i := 0; i < 8; i++ {
			_ = mx.Exp(mx.AddScalar(x, float32(i))) // dies at once
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // cleanups run on their own goroutine
		pool.Lock()
		recycled = recycled || pool.bytes > 0
		pool.Unlock()
	}
	if !recycled {
		t.Errorf("no buffer came back to the pool after 20 collections")
	}
	for i, k := range keep {
		v, err := k.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for j, got := range v {
			if got != want[i] {
				t.Fatalf("kept array %d changed at %d: got %v, want %v", i, j, got, want[i])
			}
		}
	}
	runtime.KeepAlive(keep)
}
