package cpu

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The Go heap's pace. Arrays under 64 KiB are Go memory (pool.go), and work
// made of many small arrays, such as a small model's decode step or a training
// step on a few tokens, allocates its whole live heap over again every few
// milliseconds. With Go's default pacing (collect when the heap has doubled) a
// 10 MB live heap was collected 820 times in five seconds of test-time
// training on the demo model, and a step spent a third of its time in the
// collector and its allocation assists.
//
// The pacer gives the heap at least heapHeadroom of room between collections:
// after each collection it sets the GC percentage so that the next goal is
// 2·live + heapHeadroom. A large heap keeps close to Go's default; a small one
// costs at most heapHeadroom more memory. A GOGC set in the environment is
// left alone.
const heapHeadroom = 64 << 20

var pacing sync.Once

func startPacing() {
	pacing.Do(func() {
		if _, set := os.LookupEnv("GOGC"); !set {
			pace()
		}
	})
}

// sentinel is an object no one holds: its cleanup runs once per collection.
// It is larger than the tiny allocator's 16 bytes, so it dies alone.
type sentinel struct{ _ [32]byte }

func pace() {
	runtime.AddCleanup(&sentinel{}, func(struct{}) {
		setPace()
		pace()
	}, struct{}{})
}

// setPace sets the GC percentage that puts the next goal at 2·live +
// heapHeadroom. Go's goal grows with the percentage from the live heap by an
// amount proportional to it (the live heap, stacks and globals), so the
// percentage is found from the goal one trial setting gives.
func setPace() {
	live := readMetric("/gc/heap/live:bytes")
	if live <= 0 {
		return
	}
	const trial = 100
	debug.SetGCPercent(trial)
	goal := readMetric("/gc/heap/goal:bytes")
	if goal <= live {
		return
	}
	pct := int64(trial) * (live + heapHeadroom) / (goal - live)
	debug.SetGCPercent(int(min(10_000, max(100, pct))))
}

func readMetric(name string) int64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
