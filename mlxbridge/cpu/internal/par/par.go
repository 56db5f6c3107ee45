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

// group is one Run: its function and how many parts other than the caller's are left.
type group struct {
	f       func(i int)
	left    atomic.Int32
	waiting atomic.Bool   // the caller stopped spinning and waits on done
	done    chan struct{} // made by the caller before it sets waiting
}

func (g *group) finish() {
	if g.left.Add(-1) == 0 && g.waiting.Load() {
		close(g.done)
	}
}

type worker struct {
	state atomic.Int32 // idle, reserved (by a caller writing g, i), assigned
	g     *group
	i     int
	wake  chan struct{}
	_     [64]byte // keep workers' states on separate cache lines
}

const (
	idle int32 = iota
	reserved
	assigned
)

// Cores is how many parts Run runs at once: the calling goroutine and one worker per
// extra core. A GOMAXPROCS above the machine's cores (set by hand) would only add
// spinning workers, so it counts min(GOMAXPROCS, NumCPU) at the first call.
func Cores() int { return len(pool()) + 1 }

var pool = sync.OnceValue(func() []*worker {
	ws := make([]*worker, max(0, min(runtime.GOMAXPROCS(0), runtime.NumCPU())-1))
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
		g, i := w.g, w.i
		g.f(i)
		w.g = nil
		// Idle only once the part has returned: a loop nested in it must not hand
		// its parts to the worker that is running it.
		w.state.Store(idle)
		g.finish()
	}
}

// take gives part i of g to w if w is idle, and wakes it.
func (w *worker) take(g *group, i int) bool {
	if w.state.Load() != idle || !w.state.CompareAndSwap(idle, reserved) {
		return false
	}
	w.g, w.i = g, i
	w.state.Store(assigned)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// spin polls cond for up to spinFor and reports whether it became true. It yields the
// core to other goroutines only now and then: a yield goes through the scheduler, which
// costs more than most hand-overs it waits for.
func spin(cond func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i%256 == 255 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return false
			}
			if i%4096 == 4095 {
				runtime.Gosched()
			}
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
	g := &group{f: f}
	g.left.Store(int32(parts - 1))
	ws := pool()
	next := 0
	for i := 1; i < parts; i++ {
		placed := false
		for next < len(ws) && !placed {
			placed = ws[next].take(g, i)
			next++
		}
		if !placed {
			go func() {
				f(i)
				g.finish()
			}()
		}
	}
	f(0)
	if spin(func() bool { return g.left.Load() == 0 }) {
		return
	}
	g.done = make(chan struct{})
	g.waiting.Store(true)
	if g.left.Load() == 0 {
		return // the last part finished before it could see waiting
	}
	<-g.done
}

// Ranges calls f(lo, hi) over parts contiguous ranges cutting [0, n) (see Bounds),
// through Run.
func Ranges(n, align, parts int, f func(lo, hi int)) {
	parts = max(1, min(parts, (n+align-1)/align))
	Run(parts, func(i int) {
		if lo, hi := Bounds(n, align, parts, i); hi > lo {
			f(lo, hi)
		}
	})
}

// Bounds is range i of parts contiguous ranges cutting [0, n), each but the last a
// multiple of align long; a range may be empty when n is small.
func Bounds(n, align, parts, i int) (lo, hi int) {
	lo = min(n, (n*i/parts+align-1)/align*align)
	hi = n
	if i < parts-1 {
		hi = min(n, (n*(i+1)/parts+align-1)/align*align)
	}
	return lo, hi
}
