package cpu

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// After a collection the pacer puts the heap goal at 2·live + heapHeadroom,
// where Go's default would put it at about 2·live.
func TestPacerHeadroom(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set: the pacer leaves the heap alone")
	}
	New()
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 64<<10)) // 4 MiB live
	}
	// The cleanup that sets the pace runs on its own goroutine after each
	// collection; until it has, the goal is the last percentage's.
	var live, goal int64
	for range 20 {
		runtime.GC()
		for range 50 {
			live, goal = readMetric("/gc/heap/live:bytes"), readMetric("/gc/heap/goal:bytes")
			if d := goal - (2*live + heapHeadroom); d > -(2<<20) && d < 2<<20 {
				runtime.KeepAlive(keep)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	runtime.KeepAlive(keep)
	t.Errorf("live %d MiB: heap goal %d MiB, want about %d MiB", live>>20, goal>>20, (2*live+heapHeadroom)>>20)
}
