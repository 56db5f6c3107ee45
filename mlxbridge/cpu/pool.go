package cpu

/*
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

// keep_heap has glibc keep freed buffers in the process for the next malloc instead of
// returning them to the system: every page of a fresh block faults on first write (10–15
// µs a page, zeroing included, on the two-core VM this was measured on), and a training
// step allocates its working set again between two collections. Three settings, because
// each alone leaves a way out:
//   - one arena: cgo calls come from many OS threads, and glibc gives threads arenas of
//     their own whose 64 MiB heaps are unmapped as soon as they are empty;
//   - no automatic trimming: a collection frees most of a step's buffers at once, and the
//     free top of the heap, gigabytes for a larger model, went back to the system each time;
//   - blocks up to 1 GiB (a large vocabulary's logits) from the heap rather than mmap, which
//     would unmap them on free.
// ClearCache (clearPool) hands the kept memory back. keep_heap is a constructor, so it runs
// before the Go runtime starts its threads: glibc fixes its arena limit when a second
// thread first mallocs.
__attribute__((constructor)) static void keep_heap(void) {
#ifdef __GLIBC__
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, -1);
	mallopt(M_TOP_PAD, 32 << 20); // grow the heap, and ask for its huge pages, 32 MiB at a time
#endif
}

// heap_huge asks Linux to back the heap grown since from (an address) with huge pages, and
// returns where it stopped: a first write then faults once per 2 MiB instead of once per
// 4 KiB page. Only whole 2 MiB blocks below the heap's end are asked for; the rest waits for
// the heap to grow. p, a block just allocated, says where the heap is on the first call (a
// block glibc mmap'd instead lies above the heap, and then nothing is asked for).
static uintptr_t heap_huge(uintptr_t from, void *p) {
#if defined(__linux__) && defined(__GLIBC__)
	uintptr_t huge = 2 << 20, top = (uintptr_t)sbrk(0) & ~(huge - 1);
	if (from == 0) from = (uintptr_t)p & ~(huge - 1);
	if (top > from) {
		madvise((void *)from, top - from, MADV_HUGEPAGE);
		return top;
	}
#endif
	return from;
}

// trim_heap returns the freed memory glibc kept to the system.
static void trim_heap(void) {
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}
*/
import "C"

import (
	"math/bits"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Array memory lives outside the Go heap.
//
// Big float buffers (inputs copied in, and the outputs of every heavy kernel) are
// allocated with C's malloc and counted one array at a time; a buffer returns to a
// small free list, or to the C heap, when the garbage collector finds its *buf
// unreachable (runtime.AddCleanup with the C pointer as the argument).
//
// Why not Go slices recycled through cleanups, as before: a cleanup's argument is kept
// alive for the cycle in which its object dies, so every buffer that died since the
// last collection was marked live, the pacer doubled the next heap goal from that,
// and live memory grew by the working set at every collection: a 2.4M-parameter LoRA
// run held 6 GB after 24 collections and was killed near step 145. C memory is
// invisible to the pacer, so collections are triggered here instead, by the bytes
// allocated since the last one (gcAfter).
//
// Safety: a buffer may be freed as soon as its *buf is unreachable, even while a
// kernel still reads a slice of it, so the mlxbridge frontend keeps an op's inputs
// alive until the backend returns (runtime.KeepAlive), and kernels never wrap a
// buffer they did not allocate for the output.

// Buffers of 4 KiB and up live in C memory too: on the Go heap the runtime's scavenger
// hands freed pages back to the system 64 KiB at a time and they fault again on reuse,
// which left a Qwen3-0.6B LoRA step at seq 512 tens of thousands of faults a step after
// the C heap stopped faulting.
const (
	cMin        = 1 << 10 // floats (4 KiB); smaller buffers stay on the Go heap
	freeMax     = 256 << 20
	freePerSize = 8
	gcMin       = 64 << 20 // collect after at least this many new bytes...
)

var mem struct {
	arrays   atomic.Int64 // bytes of live arrays in C memory
	pooled   atomic.Int64 // bytes kept on the free list
	peak     atomic.Int64 // highest arrays+pooled seen
	since    atomic.Int64 // bytes allocated since the last triggered collection
	gcActive atomic.Bool

	sync.Mutex
	free    map[int][]unsafe.Pointer // by size class, in floats
	hugeTo  C.uintptr_t              // the heap below this asked for huge pages (heap_huge)
	pending map[unsafe.Pointer]int   // allocated, not yet owned by a *buf: size class
}

func init() {
	mem.free = map[int][]unsafe.Pointer{}
	mem.pending = map[unsafe.Pointer]int{}
}

// sizeClass rounds n up to one of four steps per power of two (at most 25% unused),
// so buffers of nearby lengths — batches padded to different lengths — share a list.
func sizeClass(n int) int {
	if n <= 4 {
		return n
	}
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return (n + step - 1) / step * step
}

// newF returns a float buffer of length n with garbage contents, for kernels that
// write every element of their output. A big one must be handed to fbuf (or
// dropped with freeF); a small one is ordinary Go memory.
func newF(n int) []float32 {
	if n < cMin {
		return make([]float32, n)
	}
	c := sizeClass(n)
	mem.Lock()
	var p unsafe.Pointer
	if l := mem.free[c]; len(l) > 0 {
		p = l[len(l)-1]
		mem.free[c] = l[:len(l)-1]
		mem.pooled.Add(-int64(c) * 4)
	}
	mem.Unlock()
	fresh := p == nil
	if fresh {
		p = C.malloc(C.size_t(c) * 4)
		if p == nil {
			panic("cpu: out of memory allocating " + strconv.FormatInt(int64(c)*4, 10) + " bytes")
		}
	}
	mem.Lock()
	if fresh {
		mem.hugeTo = C.heap_huge(mem.hugeTo, p)
	}
	mem.pending[p] = c
	mem.Unlock()
	grow(int64(c) * 4)
	noteAlloc(int64(c) * 4)
	return unsafe.Slice((*float32)(p), n)
}

// newFZero is newF with every element zero.
func newFZero(n int) []float32 {
	s := newF(n)
	if n >= cMin { // make already zeroed a small one
		C.memset(unsafe.Pointer(&s[0]), 0, C.size_t(n)*4)
	}
	return s
}

// fbuf wraps a float slice as an array buffer. A slice from newF becomes owned by the
// buffer and is released when the buffer dies.
func fbuf(s []float32) *buf {
	b := &buf{f: s}
	if len(s) < cMin {
		return b
	}
	p := unsafe.Pointer(&s[0])
	mem.Lock()
	c, ok := mem.pending[p]
	delete(mem.pending, p)
	mem.Unlock()
	if ok {
		runtime.AddCleanup(b, release, block{p, c})
	}
	return b
}

type block struct {
	p unsafe.Pointer // C memory: the collector does not trace it
	c int            // size class in floats
}

// release returns a dead array's buffer to the free list, or to the C heap.
func release(bl block) {
	n := int64(bl.c) * 4
	mem.arrays.Add(-n)
	mem.Lock()
	if len(mem.free[bl.c]) < freePerSize && mem.pooled.Load()+n <= freeMax {
		mem.free[bl.c] = append(mem.free[bl.c], bl.p)
		mem.pooled.Add(n)
		mem.Unlock()
		return
	}
	mem.Unlock()
	C.free(bl.p)
}

// grow counts n bytes more of live arrays and raises the peak.
func grow(n int64) {
	cur := mem.arrays.Add(n) + mem.pooled.Load()
	for {
		p := mem.peak.Load()
		if cur <= p || mem.peak.CompareAndSwap(p, cur) {
			return
		}
	}
}

// noteAlloc starts a collection in the background once the bytes allocated since the
// last one exceed half of what is live (and gcMin): dead arrays are found only by the
// collector, and the Go heap alone would rarely wake it now that arrays live in C.
func noteAlloc(n int64) {
	since := mem.since.Add(n)
	live := mem.arrays.Load() - since
	if since < max(gcMin, live/2) || !mem.gcActive.CompareAndSwap(false, true) {
		return
	}
	mem.since.Store(0)
	go func() {
		runtime.GC()
		mem.gcActive.Store(false)
	}()
}

// clearPool returns the free list's buffers, and what the C heap kept, to the system.
func clearPool() {
	mem.Lock()
	defer mem.Unlock()
	for c, l := range mem.free {
		for _, p := range l {
			C.free(p)
		}
		mem.pooled.Add(-int64(c) * 4 * int64(len(l)))
	}
	clear(mem.free)
	C.trim_heap()
}

// resetPeak sets the peak to the bytes held now.
func resetPeak() { mem.peak.Store(mem.arrays.Load() + mem.pooled.Load()) }

// arrayBytes reports the C memory the backend holds: live arrays and the free list.
func arrayBytes() (arrays, pooled, peak int64) {
	return mem.arrays.Load(), mem.pooled.Load(), mem.peak.Load()
}

// goHeapLive is the Go heap that survived the last collection (small arrays,
// tokenizers, bookkeeping), not the garbage allocated since; before the first
// collection, the heap's objects.
func goHeapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > 0 {
		return int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		return int64(s[1].Value.Uint64())
	}
	return 0
}
