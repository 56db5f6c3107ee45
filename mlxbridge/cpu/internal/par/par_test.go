package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCallsEveryPartOnce runs many loops, some nested in others (each finding the
// workers busy), and checks every part ran exactly once before Run returned.
func TestRunCallsEveryPartOnce(t *testing.T) {
	for round := range 2000 {
		parts := 1 + round%7
		counts := make([]atomic.Int32, parts*parts)
		Run(parts, func(i int) {
			Run(parts, func(j int) { counts[i*parts+j].Add(1) })
		})
		for k := range counts {
			if c := counts[k].Load(); c != 1 {
				t.Fatalf("round %d: part %d ran %d times", round, k, c)
			}
		}
		if round%500 == 0 {
			time.Sleep(2 * spinFor) // let the workers park, so waking them is covered too
		}
	}
}

// TestRunFromManyGoroutines has loops started concurrently share the pool.
func TestRunFromManyGoroutines(t *testing.T) {
	var wg sync.WaitGroup
	var total atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for range 300 {
				Run(3+g%3, func(int) { total.Add(1) })
			}
		})
	}
	wg.Wait()
	want := int64(0)
	for g := range 8 {
		want += int64(300 * (3 + g%3))
	}
	if total.Load() != want {
		t.Fatalf("%d parts ran, want %d", total.Load(), want)
	}
}

func TestRangesCoverOnce(t *testing.T) {
	for _, n := range []int{0, 1, 5, 16, 17, 100, 1031} {
		for parts := 1; parts <= 5; parts++ {
			seen := make([]atomic.Int32, n)
			var unaligned atomic.Bool
			Ranges(n, 4, parts, func(lo, hi int) {
				if lo%4 != 0 {
					unaligned.Store(true)
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			if unaligned.Load() {
				t.Errorf("n=%d parts=%d: a range starts unaligned", n, parts)
			}
			for i := range seen {
				if s := seen[i].Load(); s != 1 {
					t.Fatalf("n=%d parts=%d: index %d covered %d times", n, parts, i, s)
				}
			}
		}
	}
}

// BenchmarkRun is the cost of one two-part loop with empty parts: the hand-over.
func BenchmarkRun(b *testing.B) {
	for b.Loop() {
		Run(2, func(int) {})
	}
}

// BenchmarkGoroutines is the same with a fresh goroutine per part, for comparison.
func BenchmarkGoroutines(b *testing.B) {
	for b.Loop() {
		var wg sync.WaitGroup
		wg.Go(func() {})
		wg.Wait()
	}
}

func TestCores(t *testing.T) {
	if got, want := Cores(), min(runtime.GOMAXPROCS(0), runtime.NumCPU()); got != max(1, want) {
		t.Errorf("Cores() = %d, want %d", got, want)
	}
}
