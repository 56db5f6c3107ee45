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
	n := cMin * 2
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
		recycled = recycled || mem.pooled.Load() > 0
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

// Live array bytes must follow what the program holds, not what it has allocated:
// churn through arrays of many lengths (a trainer's padded batches) while keeping a
// fixed working set, and check the count comes back to the working set.
func TestArrayBytesFollowLiveArrays(t *testing.T) {
	be := New()
	settle := func() int64 {
		for i := 0; i < 3; i++ {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		a, _, _ := arrayBytes()
		return a
	}
	base := settle()
	const n = cMin * 4
	keep := mx.FromData(be, mx.Float32, make([]float32, n), n)
	held := settle() - base
	if held < n*4 || held > n*5 {
		t.Fatalf("one live %d-float array counts %d bytes, want about %d", n, held, n*4)
	}
	for round := 0; round < 200; round++ {
		m := cMin + round*997 // a new length each time
		x := mx.FromData(be, mx.Float32, make([]float32, m), m)
		_ = mx.Exp(mx.AddScalar(x, 1))
	}
	if got := settle() - base; got > held+held/2 {
		t.Errorf("after 200 dead arrays of new lengths, live array bytes are %d, want about %d", got, held)
	}
	_, pooled, _ := arrayBytes()
	if pooled > freeMax {
		t.Errorf("free list holds %d bytes, more than its cap %d", pooled, freeMax)
	}
	if pooled == 0 {
		t.Errorf("200 dead arrays left nothing on the free list")
	}
	if err := mx.ClearCache(be); err != nil {
		t.Fatal(err)
	}
	if _, pooled, _ := arrayBytes(); pooled != 0 {
		t.Errorf("after ClearCache the free list holds %d bytes", pooled)
	}
	if got := settle() - base; got < held {
		t.Errorf("ClearCache freed live arrays: %d bytes live, want at least %d", got, held)
	}
	runtime.KeepAlive(keep)
}

func TestSizeClass(t *testing.T) {
	for _, n := range []int{1, 4, 5, 7, 8, 9, 100, 1000, 1 << 14, 1<<14 + 1, 123457, 1 << 24} {
		c := sizeClass(n)
		if c < n || float64(c) > float64(n)*1.25+1 {
			t.Errorf("sizeClass(%d) = %d, want in [%d, %.0f]", n, c, n, float64(n)*1.25)
		}
	}
}

// TestResetPeakMemory checks that a reset peak is what the backend holds then (arrays
// and free list), not the high-water mark before, and that it follows new arrays up.
func TestResetPeakMemory(t *testing.T) {
	be := New()
	const n = 1 << 22 // 16 MiB, far over anything else the test holds
	func() {
		big := mx.FromData(be, mx.Float32, make([]float32, n), n)
		mx.Eval(mx.AddScalar(big, 1))
	}()
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	_, _, before := arrayBytes()
	if !mx.ResetPeakMemory(be) {
		t.Fatal("the cpu backend cannot reset its peak")
	}
	arrays, pooled, after := arrayBytes()
	if after != arrays+pooled || after > before {
		t.Fatalf("peak %d before the reset, %d after, holding %d: want the held bytes", before, after, arrays+pooled)
	}
	m := n/4 + 12345 // a size class of its own
	small := mx.FromData(be, mx.Float32, make([]float32, m), m)
	if _, _, grown := arrayBytes(); grown < after+int64(m)*4 {
		t.Fatalf("peak %d after a new %d-byte array, was %d", grown, m*4, after)
	}
	runtime.KeepAlive(small)
}
