//go:build cgo && (darwin || linux)

package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"

	mx "github.com/inloop/inloop/mlxbridge"
)

func init() {
	mx.Register("mlx", 10, func() (mx.Backend, error) { return Open() })
}

// Backend is the mlx backend. There is one per process: libmlxc's error handler
// and allocator are process-wide, and one worker thread owns every MLX call.
type Backend struct {
	lib    *library
	w      *worker
	stream C.mlxc_stream
	gpu    bool

	// Handles whose Go arrays became unreachable wait here until the worker
	// frees them (see memory.go).
	mu      sync.Mutex
	pending []C.mlxc_array
	npend   atomic.Int32
	live    atomic.Int64 // bytes of arrays whose handles are alive, as shapes say
	gcAt    atomic.Int64 // live bytes at which a collection is started
	gcBusy  atomic.Bool

	ropes map[ropeKey]*ropeTable // RoPE's angles on the CPU device (rope.go); worker only

	compiles bool              // Compile is offered (compile.go)
	closures []compiledRelease // compiled functions to free, under mu
}

var (
	openOnce sync.Once
	theOne   *Backend
	openErr  error
)

// Open loads libmlxc (see the package doc for where it looks), starts the worker
// thread and picks the GPU stream when a GPU is present, else the CPU stream. The
// backend is opened once per process; later calls return the same one or the same
// error, which wraps mlxbridge.ErrUnavailable when no library could be used.
func Open() (*Backend, error) {
	openOnce.Do(func() {
		lib, err := loadLibrary(candidates())
		if err != nil {
			openErr = err
			return
		}
		be := &Backend{lib: lib}
		be.gcAt.Store(minGCBytes)
		be.w = newWorker(func() { openErr = be.initStream() })
		if openErr == nil {
			be.w.do(be.initCompile)
			theOne = be
		}
	})
	return theOne, openErr
}

// initStream runs on the worker: streams belong to the thread that made them.
func (be *Backend) initStream() error {
	var metal C.bool
	if C.mlxc_metal_is_available(&metal) != 0 {
		return lastError("metal_is_available")
	}
	be.gpu = bool(metal)
	if !be.gpu && C.mlxc_has_device_count() != 0 { // CUDA builds
		var n C.int
		if C.mlxc_device_count(&n, 1 /* GPU */) == 0 && n > 0 {
			be.gpu = true
		}
		C.mlxc_clear_error()
	}
	if be.gpu {
		be.stream = C.mlxc_default_gpu_stream_new()
	} else {
		be.stream = C.mlxc_default_cpu_stream_new()
	}
	if be.stream.ctx == nil {
		return lastError("default stream")
	}
	if C.mlxc_has_set_default_stream() != 0 && C.mlxc_set_default_stream(be.stream) != 0 {
		return lastError("set default stream")
	}
	return nil
}

func (be *Backend) Name() string { return "mlx" }

// Device is "gpu" when MLX runs on the GPU stream, else "cpu".
func (be *Backend) Device() string {
	if be.gpu {
		return "gpu"
	}
	return "cpu"
}

// Version is the MLX release the loaded libmlxc reports (mlx_version).
func (be *Backend) Version() string { return be.lib.version }

// LibraryPath is the file the backend loaded.
func (be *Backend) LibraryPath() string { return be.lib.path }

// Describe is one line for logs and `inloop doctor`.
func (be *Backend) Describe() string {
	return fmt.Sprintf("mlx %s on %s (%s)", be.lib.version, be.Device(), be.lib.path)
}

// Eval computes lazily built arrays now.
func (be *Backend) Eval(xs ...*mx.Array) error { return be.eval(xs, false) }

// AsyncEval starts computing xs and returns without waiting: mx.AsyncEval.
func (be *Backend) AsyncEval(xs ...*mx.Array) error { return be.eval(xs, true) }

func (be *Backend) eval(xs []*mx.Array, async bool) error {
	var err error
	be.w.wait(func() {
		be.drain()
		cs := make([]C.mlxc_array, len(xs))
		for i, x := range xs {
			if cs[i], err = arg(x); err != nil {
				return
			}
		}
		v := C.mlxc_vector_array_new_data(ptr(cs), C.size_t(len(cs)))
		defer C.mlxc_vector_array_free(v)
		switch {
		case async && C.mlxc_async_eval(v) != 0:
			err = lastError("async eval")
		case !async && C.mlxc_eval(v) != 0:
			err = lastError("eval")
		}
	})
	return err
}

// Synchronize waits for all work queued on the backend's stream.
func (be *Backend) Synchronize() error {
	var err error
	be.w.wait(func() {
		if C.mlxc_synchronize(be.stream) != 0 {
			err = lastError("synchronize")
		}
	})
	return err
}

var (
	_ mx.Backend           = (*Backend)(nil)
	_ mx.Evaluator         = (*Backend)(nil)
	_ mx.Softmaxer         = (*Backend)(nil)
	_ mx.LogSumExper       = (*Backend)(nil)
	_ mx.RMSNormer         = (*Backend)(nil)
	_ mx.RoPEr             = (*Backend)(nil)
	_ mx.SDPAer            = (*Backend)(nil)
	_ mx.QuantizedMatMuler = (*Backend)(nil)
	_ mx.Grader            = (*Backend)(nil)
	_ mx.MemoryReporter    = (*Backend)(nil)
	_ mx.CacheClearer      = (*Backend)(nil)
	_ mx.Runner            = (*Backend)(nil)
	_ mx.AsyncEvaluator    = (*Backend)(nil)
	_ mx.Freer             = (*Backend)(nil)
	_ mx.Sorter            = (*Backend)(nil)
	_ mx.CumSummer         = (*Backend)(nil)
	_ mx.Compiler          = (*Backend)(nil)
)
