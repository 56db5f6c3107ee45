//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// worker runs every MLX call on one goroutine locked to its OS thread: MLX keeps
// streams and their command queues per thread, and the GUI's main thread must
// never block on the GPU. Calls from other goroutines are handed over and waited
// for; calls made on the worker itself (the user's function inside
// mlx_value_and_grad calls back into the backend) run directly.
//
// Model code issues ops back to back, each a few microseconds of work, so the
// hand-over must cost less than waking a parked thread does (~10µs, twice per
// call). Both sides therefore spin briefly before they park: the worker waits
// spinFor for the next job, the caller spinFor for its result.
type worker struct {
	mu     sync.Mutex // one caller hands over a job at a time
	slot   atomic.Pointer[job]
	parked atomic.Bool
	wake   chan struct{} // a parked worker waits here
}

type job struct {
	f       func()
	panic   any
	done    atomic.Bool
	waiting atomic.Bool   // the caller gave up spinning and waits on ch
	ch      chan struct{} // made by the caller before it sets waiting
}

const spinFor = 50 * time.Microsecond

func newWorker(init func()) *worker {
	w := &worker{wake: make(chan struct{}, 1)}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread belongs to MLX
		C.mlxc_set_worker()
		init()
		close(ready)
		for {
			w.next().run()
		}
	}()
	<-ready
	return w
}

// next returns the next job, spinning for a while before it parks. A caller
// stores its job and then looks at parked; next sets parked and then looks at the
// slot, so one of them always sees the other (a spare wake-up is harmless).
func (w *worker) next() *job {
	if spinUntil(func() bool { return w.slot.Load() != nil }) {
		return w.slot.Swap(nil)
	}
	for {
		w.parked.Store(true)
		if j := w.slot.Swap(nil); j != nil {
			w.parked.Store(false)
			return j
		}
		<-w.wake
		w.parked.Store(false)
		if j := w.slot.Swap(nil); j != nil {
			return j
		}
	}
}

// spinUntil polls cond for up to spinFor and reports whether it became true.
func spinUntil(cond func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i%64 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return false
			}
		}
	}
}

func (j *job) run() {
	defer func() {
		j.panic = recover()
		j.done.Store(true)
		if j.waiting.Load() {
			j.ch <- struct{}{}
		}
	}()
	j.f()
}

// do runs f on the worker and waits, spinning first: for an op's few
// microseconds of work. A panic in f is re-raised in the caller.
func (w *worker) do(f func()) { w.hand(f, true) }

// wait is do for work that takes longer than waking the caller does (a decoding
// step's build, a readback that waits for the device, an eval): the caller parks
// at once, because a caller spinning meanwhile takes a core from the worker and
// from MLX's own threads (on two cores the demo model decoded 4–45% slower, in
// three rounds, with every caller spinning).
func (w *worker) wait(f func()) { w.hand(f, false) }

func (w *worker) hand(f func(), spin bool) {
	if C.mlxc_on_worker() != 0 {
		f()
		return
	}
	j := &job{f: f}
	w.mu.Lock()
	w.slot.Store(j)
	if w.parked.Load() {
		select {
		case w.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	// As in next: the caller sets waiting and then looks at done, run sets done
	// and then looks at waiting.
	if !spin || !spinUntil(j.done.Load) {
		j.ch = make(chan struct{}, 1)
		j.waiting.Store(true)
		if !j.done.Load() {
			<-j.ch
		}
	}
	w.mu.Unlock()
	if j.panic != nil {
		panic(j.panic)
	}
}

// lastError turns the captured MLX message into a Go error and clears it. It must
// run on the worker, right after the failing call.
func lastError(op string) error {
	msg := "failed"
	if m := C.mlxc_last_error(); m != nil {
		msg = trimLocation(C.GoString(m))
	}
	C.mlxc_clear_error()
	return fmt.Errorf("mlx: %s: %s", op, msg)
}

// trimLocation drops mlx-c's " at file.cpp:123" suffix, which names a source
// file on the machine that built the library.
func trimLocation(msg string) string {
	i := strings.LastIndex(msg, " at ")
	if i < 0 {
		return msg
	}
	loc := msg[i+4:]
	j := strings.LastIndex(loc, ":")
	if j < 0 || !strings.Contains(loc[:j], ".") || strings.ContainsAny(loc, " \n") {
		return msg
	}
	for _, c := range loc[j+1:] {
		if c < '0' || c > '9' {
			return msg
		}
	}
	return msg[:i]
}

// Run calls f on the worker: the ops f issues run there directly (see
// mlxbridge.Run).
func (be *Backend) Run(f func()) { be.w.wait(f) }
