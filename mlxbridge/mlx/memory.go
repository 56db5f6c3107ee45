//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"runtime"

	mx "github.com/inloop/inloop/mlxbridge"
)

// How arrays are freed. Go's collector cannot see MLX's memory, so three things
// work together:
//   - every handle has a cleanup (runtime.AddCleanup) that queues its mlx_array
//     for the worker once the Go array is unreachable; the worker frees the queue
//     before its next call;
//   - the backend counts the bytes of live handles and starts a collection when
//     they double since the last one (at least minGCBytes), as GOGC=100 would if
//     the collector could see them, so a training loop's garbage is found in time;
//   - Free releases one array at once and Sweep collects and frees everything
//     unreachable now, for callers that know better (end of a step, a model unload).

const minGCBytes = 64 << 20

// released is what a cleanup needs: the C handle and its size.
type released struct {
	c     C.mlxc_array
	bytes int64
}

// release runs on the runtime's cleanup goroutine: it only queues.
func (be *Backend) release(r released) {
	be.mu.Lock()
	be.pending = append(be.pending, r.c)
	be.mu.Unlock()
	be.npend.Add(1)
	be.live.Add(-r.bytes)
}

// track counts a new handle's bytes and starts a collection when they pile up.
func (be *Backend) track(bytes int64) {
	live := be.live.Add(bytes)
	if live > be.gcAt.Load() && be.gcBusy.CompareAndSwap(false, true) {
		go func() {
			runtime.GC()
			be.gcBusy.Store(false)
		}()
	}
}

// drain frees queued handles. It runs on the worker.
func (be *Backend) drain() {
	if be.npend.Load() == 0 {
		return
	}
	be.mu.Lock()
	q, cls := be.pending, be.closures
	be.pending, be.closures = nil, nil
	be.npend.Store(0)
	be.mu.Unlock()
	for _, c := range q {
		C.mlxc_array_free(c)
	}
	for _, r := range cls {
		C.mlxc_closure_free(r.cl)
		r.h.Delete()
	}
	be.gcAt.Store(max(minGCBytes, 2*be.live.Load()))
}

// Free releases x's MLX array now. Using x (or any array sharing its handle)
// afterwards gives an error, never a crash. Arrays computed from x are unaffected:
// MLX keeps the data they need.
func (be *Backend) Free(x *mx.Array) {
	h, ok := x.Handle().(*carray)
	if !ok || x.Err() != nil {
		return
	}
	be.w.do(func() {
		if h.freed {
			return
		}
		h.freed = true
		h.cleanup.Stop()
		C.mlxc_array_free(h.c)
		be.live.Add(-h.bytes)
	})
}

// Sweep runs a garbage collection, waits for the cleanups it triggers and frees
// every MLX array whose Go array is no longer reachable.
func (be *Backend) Sweep() {
	mx.Collect()
	be.w.do(be.drain)
}

// Memory reports MLX's active and peak bytes (mlx_get_active_memory, _peak_memory).
func (be *Backend) Memory() (active, peak int64) {
	be.w.do(func() {
		be.drain()
		var a, p C.size_t
		if C.mlxc_get_active_memory(&a) != 0 || C.mlxc_get_peak_memory(&p) != 0 {
			C.mlxc_clear_error()
		}
		active, peak = int64(a), int64(p)
	})
	return active, peak
}

// CacheMemory reports the bytes MLX keeps in its buffer cache for reuse.
func (be *Backend) CacheMemory() int64 {
	var n C.size_t
	be.w.do(func() {
		if C.mlxc_get_cache_memory(&n) != 0 {
			C.mlxc_clear_error()
		}
	})
	return int64(n)
}

// ResetPeakMemory restarts peak tracking, e.g. at the start of a generation.
func (be *Backend) ResetPeakMemory() {
	be.w.do(func() {
		if C.mlxc_reset_peak_memory() != 0 {
			C.mlxc_clear_error()
		}
	})
}

// ClearCache returns MLX's cached buffers to the system.
func (be *Backend) ClearCache() error {
	var err error
	be.w.do(func() {
		be.drain()
		if C.mlxc_clear_cache() != 0 {
			err = lastError("clear cache")
		}
	})
	return err
}

// SetCacheLimit caps MLX's buffer cache and returns the previous limit.
func (be *Backend) SetCacheLimit(bytes int64) (prev int64, err error) {
	be.w.do(func() {
		var p C.size_t
		if C.mlxc_set_cache_limit(&p, C.size_t(max(bytes, 0))) != 0 {
			err = lastError("set cache limit")
		}
		prev = int64(p)
	})
	return prev, err
}

// SetMemoryLimit sets MLX's memory limit (a guideline for when to wait for
// buffers to free before allocating) and returns the previous one.
func (be *Backend) SetMemoryLimit(bytes int64) (prev int64, err error) {
	be.w.do(func() {
		var p C.size_t
		if C.mlxc_set_memory_limit(&p, C.size_t(max(bytes, 0))) != 0 {
			err = lastError("set memory limit")
		}
		prev = int64(p)
	})
	return prev, err
}
