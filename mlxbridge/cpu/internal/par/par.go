// Package par runs the cpu backend's parallel loops on a small pool of goroutines that
// stay awake for a moment after each job.
//
// Decoding a token is a few hundred products of a fraction of a millisecond each. Handed
// to fresh goroutines, each one paid for waking an idle core through the kernel — 20–70
// µs here, which made a 2048×1024 matrix-vector product twice as slow cut in two as
// OpenBLAS's own threads, which never sleep between calls. Those threads, though, spin
// for a long time after every call, and on a loaded machine they took the cores from the
// backend's other work. The pool is the middle way: one worker per extra core, spinning
// for spinFor after its last job (yielding to other goroutines as it does), then parked
// until the next one. A run that finds a worker busy (a parallel loop inside another)
// hands that part to a new goroutine instead, so nothing waits on itself.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long a worker polls for its next job, and a caller for its parts,
// before parking: longer than the gap between two products of one decoding step, much
// shorter than anything a user would notice a core busy for.
const spinFor = 100 * time.Microsecond

type worker struct {
	state atomic.Int32 // idle, assigned (job set), running
	job   func()
	wake  chan struct{}
	_     [64]byte // keep workers' states on separate cache lines
}

const (
	idle int32 = iota
	assigned
	running
)

var pool = sync.OnceValue(func() []*worker {
	ws := make([]*worker, max(0, runtime.GOMAXPROCS(0)-1))
	for i := range ws {
		w := &worker{wake: make(chan struct{}, 1)}
		ws[i] = w
		go w.loop()
	}
	return ws
})

func (w *worker) loop() {
	for {
		if !spin(func() bool { return w.state.Load() == assigned }) {
			<-w.wake
			continue
		}
		w.state.Store(running)
		w.job()
		w.job = nil
		w.state.Store(idle)
	}
}

// take gives f to w if w is idle, and wakes it.
func (w *worker) take(f func()) bool {
	if !w.state.CompareAndSwap(idle, running) { // running: reserved while job is set
		return false
	}
	w.job = f
	w.state.Store(assigned)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// spin polls cond for up to spinFor, yielding between polls, and reports whether it
// became true.
func spin(cond func() bool) bool {
	start := time.Now()
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i%16 == 15 {
			if time.Since(start) > spinFor {
				return false
			}
			runtime.Gosched()
		}
	}
}

// Run calls f(0) … f(parts-1) concurrently and returns when all have returned; f(0) runs
// on the calling goroutine. A panic in a part other than 0 crashes the program, as in a
// plain goroutine.
func Run(parts int, f func(i int)) {
	if parts <= 1 {
		if parts == 1 {
			f(0)
		}
		return
	}
	var left atomic.Int32
	left.Store(int32(parts - 1))
	done := make(chan struct{})
	var waiting atomic.Bool
	finish := func() {
		if left.Add(-1) == 0 && waiting.Load() {
			close(done)
		}
	}
	ws := pool()
	next := 0
	for i := 1; i < parts; i++ {
		job := func() {
			defer finish()
			f(i)
		}
		placed := false
		for next < len(ws) && !placed {
			placed = ws[next].take(job)
			next++
		}
		if !placed {
			go job()
		}
	}
	f(0)
	if spin(func() bool { return left.Load() == 0 }) {
		return
	}
	waiting.Store(true)
	if left.Load() == 0 {
		return // the last part finished before it could see waiting
	}
	<-done
}

// Ranges calls f(lo, hi) over parts contiguous ranges cutting [0, n), each but the last
// a multiple of align long, through Run.
func Ranges(n, align, parts int, f func(lo, hi int)) {
	parts = max(1, min(parts, (n+align-1)/align))
	Run(parts, func(i int) {
		lo := min(n, (n*i/parts+align-1)/align*align)
		hi := n
		if i < parts-1 {
			hi = min(n, (n*(i+1)/parts+align-1)/align*align)
		}
		if hi > lo {
			f(lo, hi)
		}
	})
}
