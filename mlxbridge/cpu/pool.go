package cpu

import (
	"runtime"
	"sync"
)

// Output buffers of the big kernels are recycled: a fresh multi-megabyte slice costs
// page faults and zeroing, measured at 15% of a 1024³ matmul. A buffer goes back to
// the pool when the garbage collector finds its *buf unreachable (runtime.AddCleanup),
// which is safe because no two bufs ever share a slice (Reshape shares the *buf itself).

const (
	poolMin      = 1 << 16 // floats; smaller buffers are cheap to allocate
	poolPerSize  = 8       // buffers kept per exact length
	poolMaxBytes = 1 << 30 // never hoard more than this
)

var pool = struct {
	sync.Mutex
	free  map[int][][]float32
	bytes int64
}{free: map[int][][]float32{}}

// scratch returns a float buffer of length n whose contents are garbage: only for
// kernels that overwrite every element. Wrap it with pooledBuf.
func scratch(n int) []float32 {
	if n >= poolMin {
		pool.Lock()
		if l := pool.free[n]; len(l) > 0 {
			s := l[len(l)-1]
			pool.free[n] = l[:len(l)-1]
			pool.bytes -= int64(n) * 4
			pool.Unlock()
			return s
		}
		pool.Unlock()
	}
	return make([]float32, n)
}

// pooledBuf wraps s as an array buffer that returns s to the pool when it dies.
func pooledBuf(s []float32) *buf {
	b := &buf{f: s}
	if len(s) >= poolMin {
		runtime.AddCleanup(b, recycle, s)
	}
	return b
}

func recycle(s []float32) {
	pool.Lock()
	defer pool.Unlock()
	if len(pool.free[len(s)]) >= poolPerSize || pool.bytes+int64(len(s))*4 > poolMaxBytes {
		return
	}
	pool.free[len(s)] = append(pool.free[len(s)], s)
	pool.bytes += int64(len(s)) * 4
}
