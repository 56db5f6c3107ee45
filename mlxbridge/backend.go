package mlxbridge

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

// Handle is a backend's own representation of an array's data. This package never
// looks inside it; it only passes it back to the backend that made it.
type Handle any

// ErrUnavailable is returned by a backend's opener when it cannot run on this machine
// (for example, libmlxc is not installed). "auto" then falls back to the next backend.
var ErrUnavailable = errors.New("mlxbridge: backend unavailable")

// UnaryOp names an elementwise op with one input.
type UnaryOp uint8

const (
	OpNeg UnaryOp = iota
	OpExp
	OpLog
	OpSqrt
	OpRsqrt
	OpSilu
	OpGelu       // exact: x·Φ(x)
	OpGeluApprox // tanh approximation
	OpSigmoid
	OpTanh
	OpAbs
	OpSquare
	OpSign
	OpSiluGrad       // d silu(x)/dx
	OpGeluGrad       // d gelu(x)/dx
	OpGeluApproxGrad // d gelu_approx(x)/dx
)

// BinaryOp names an elementwise op with two broadcast inputs.
type BinaryOp uint8

const (
	OpAdd BinaryOp = iota
	OpSub
	OpMul
	OpDiv
	OpMaximum
	OpMinimum
	OpPower
	OpGreater      // comparisons give Bool
	OpGreaterEqual // ...
	OpLess
	OpEqual
)

func (op BinaryOp) isCompare() bool { return op >= OpGreater }

// ReduceOp names a reduction over axes.
type ReduceOp uint8

const (
	ReduceSum ReduceOp = iota
	ReduceMax
	ReduceMin
)

// Backend is the small interface every backend implements. Arguments arrive
// validated: shapes fit, axes are normalized, out shapes are computed, and every
// *Array argument was made by this backend. Float arrays hold Float32, Float16 or
// BFloat16; integer kernels are needed only where a method says so.
type Backend interface {
	Name() string

	// FromData copies data ([]float32 for float dtypes, []int32, []uint32, or []uint8
	// for Uint8 and Bool) into a new array of the given dtype and shape.
	FromData(dt DType, shape []int, data any) (Handle, error)
	// Data copies an array out, in the Go slice type FromData takes.
	Data(a *Array) (any, error)

	Unary(op UnaryOp, x *Array) (Handle, error)
	Binary(op BinaryOp, a, b *Array, out []int, dt DType) (Handle, error)
	// Reduce reduces the sorted axes and keeps them as size 1.
	Reduce(op ReduceOp, x *Array, axes []int) (Handle, error)
	ArgMax(x *Array, axis int) (Handle, error) // Int32, axis kept as size 1
	// MatMul multiplies the last two axes, batch axes broadcast to out[:len(out)-2].
	// transA/transB use a's or b's last two axes transposed without a copy.
	MatMul(a, b *Array, transA, transB bool, out []int) (Handle, error)

	Reshape(x *Array, shape []int) (Handle, error)
	Transpose(x *Array, perm []int) (Handle, error)
	Broadcast(x *Array, shape []int) (Handle, error)
	Slice(x *Array, start, step, out []int) (Handle, error)
	// SliceUpdate returns dst with the strided window at start replaced by src.
	SliceUpdate(dst, src *Array, start, step []int) (Handle, error)
	Concatenate(xs []*Array, axis int, out []int) (Handle, error)
	// Take gathers along axis with Int32/Uint32 indices; out = x.shape[:axis]+idx.shape+x.shape[axis+1:].
	Take(x, idx *Array, axis int) (Handle, error)
	// TakeAlongAxis picks idx (same rank as x, broadcastable on other axes) along axis.
	TakeAlongAxis(x, idx *Array, axis int, out []int) (Handle, error)
	// ScatterAdd is Take's adjoint: zeros of shape, then upd's slices added at idx along axis.
	ScatterAdd(upd, idx *Array, axis int, shape []int) (Handle, error)
	// ScatterAddAlongAxis is TakeAlongAxis's adjoint.
	ScatterAddAlongAxis(upd, idx *Array, axis int, shape []int) (Handle, error)
	Where(cond, a, b *Array, out []int, dt DType) (Handle, error)
	AsType(x *Array, dt DType) (Handle, error)
}

// Optional abilities. A backend that has a fused kernel implements the interface;
// otherwise this package composes the op from the required ones (compose.go).
type (
	// Evaluator is implemented by lazy backends: Eval computes the arrays now.
	Evaluator interface{ Eval(xs ...*Array) error }
	// AsyncEvaluator is implemented by lazy backends that can compute arrays
	// while the caller goes on: AsyncEval starts and returns.
	AsyncEvaluator interface{ AsyncEval(xs ...*Array) error }
	// FloatReader copies a float array out into dst's storage where it has the
	// room (Array.Float32sInto), instead of into a new slice.
	FloatReader interface {
		Float32sInto(a *Array, dst []float32) ([]float32, error)
	}
	// Softmaxer computes softmax along the last axis.
	Softmaxer interface {
		Softmax(x *Array) (Handle, error)
	}
	// LogSumExper reduces the last axis, keeping it as size 1.
	LogSumExper interface {
		LogSumExp(x *Array) (Handle, error)
	}
	// RMSNormer normalizes the last axis: x * rsqrt(mean(x^2)+eps) * w.
	RMSNormer interface {
		RMSNorm(x, w *Array, eps float32) (Handle, error)
	}
	// RMSNormGrader is RMSNorm's input gradient in one pass over float32 x
	// (..., D), w (D) and the cotangent g of x's shape:
	// r·(g·w) − x·r³·Σ(g·w·x)/D per row, r = rsqrt(mean(x²)+eps).
	RMSNormGrader interface {
		RMSNormGrad(x, w, g *Array, eps float32) (Handle, error)
	}
	// RoPEr rotates the first dims of the last axis; positions run along axis -2 from offset.
	RoPEr interface {
		RoPE(x *Array, o RoPEOptions) (Handle, error)
	}
	// SDPAer computes attention for q (B,Hq,L,D), k,v (B,Hkv,S,D) with Hq a multiple of Hkv.
	SDPAer interface {
		SDPA(q, k, v *Array, scale float32, causal bool, mask *Array) (Handle, error)
	}
	// SDPAVJPer is attention's backward pass: the cotangents of q, k and v for the
	// output cotangent g. With it, training uses the fused forward too.
	SDPAVJPer interface {
		SDPAVJP(q, k, v *Array, scale float32, causal bool, mask, g *Array) (dq, dk, dv Handle, err error)
	}
	// QuantizedMatMuler computes x @ dequant(w).T (transpose) or x @ dequant(w).
	QuantizedMatMuler interface {
		QuantizedMatMul(x, w, scales, biases *Array, transpose bool, groupSize, bits int, out []int) (Handle, error)
	}
	// QuantizedMatMulerA8 computes x @ dequant(w).T with x rounded to 8 bits and
	// integer dot products (QuantizedMatmulA8): for one row x, for the bit widths
	// HasA8 reports it has a kernel for, and for any number of rows, for those
	// HasA8Rows reports.
	QuantizedMatMulerA8 interface {
		QuantizedMatMulA8(x, w, scales, biases *Array, groupSize, bits int, out []int) (Handle, error)
		HasA8(bits int) bool
		HasA8Rows(bits int) bool
	}
	// BF16MatMuler computes x @ wᵀ with x rounded to bfloat16 (MatmulTBF16) for the
	// bfloat16 matrices w it reports TakesBF16 for (x float32, any number of rows);
	// HasBF16Rows reports whether it has the kernel at all (for some such w).
	BF16MatMuler interface {
		MatMulBF16(x, w *Array, out []int) (Handle, error)
		TakesBF16(w *Array) bool
		HasBF16Rows() bool
	}
	// QuantizedMultiMatMuler computes QuantizedMatmuls in one call: x @ dequant(w)ᵀ
	// for every 2-D matrix of ws, all of x's width and one scales dtype, into arrays
	// of the shapes outs gives; on 8-bit activations where a8 is set (then x is one
	// row and HasA8(bits) holds, or HasA8Rows(bits) does).
	QuantizedMultiMatMuler interface {
		QuantizedMatMuls(x *Array, ws []QuantizedMatrix, groupSize, bits int, a8 bool, outs [][]int) ([]Handle, error)
	}
	// Dequantizer unpacks w = scale·q + bias on the device, in the scales' dtype
	// (mx.dequantize), so a quantized table need not travel to the host.
	Dequantizer interface {
		Dequantize(w, scales, biases *Array, groupSize, bits int, out []int) (Handle, error)
	}
	// Sorter sorts the last axis in ascending order, NaNs last.
	Sorter interface {
		Sort(x *Array) (Handle, error)
	}
	// CumSummer is the inclusive running sum along the last axis, from its end
	// when reverse.
	CumSummer interface {
		CumSum(x *Array, reverse bool) (Handle, error)
	}
	// Compacter holds float16 and bfloat16 arrays two bytes a value (Compact), and
	// makes one from the values' little-endian bit patterns (LoadTensorCompact).
	Compacter interface {
		Compact(x *Array) (Handle, error)
		CompactBits(dt DType, raw []byte) (Handle, error)
	}
	// CompactScaleReader reports whether QuantizedMatmul reads compact 16-bit
	// scales and biases of bits-bit weights at their width in its decoding kernels;
	// elsewhere they are best widened once, at load (ReadsCompactScales).
	CompactScaleReader interface{ ReadsCompactScales(bits int) bool }
	// PartsAttender runs AttendParts without joining the parts: the shapes are
	// checked, at least one part, all of q's dtype.
	PartsAttender interface {
		AttendParts(q *Array, ks, vs []*Array, scale float32) (Handle, error)
	}
	// QuantizedAttender runs AttendQuantized for the bit widths it reports.
	QuantizedAttender interface {
		AttendsQuantized(bits int) bool
		AttendQuantized(q *Array, k0, v0 QuantizedKV, groupSize, bits int, ks, vs []*Array, scale float32) (Handle, error)
	}
	// AdamUpdater runs AdamUpdate in one pass: p, g, m and v share a float
	// dtype and shape, or m and v are both nil (zero moments); the handles
	// are p', m' and v'.
	AdamUpdater interface {
		AdamUpdate(p, g, m, v *Array, c AdamCoeffs) (p2, m2, v2 Handle, err error)
	}
	// GlobalNormer computes GlobalNorm: xs are float arrays, at least one; the
	// result is a Float32 0-d array.
	GlobalNormer interface {
		GlobalNorm(xs []*Array) (Handle, error)
	}
	// CrossEntropyGrader is CrossEntropy's backward pass in one op: g·(softmax(x) −
	// onehot(targets)) along the last axis, from the logits x (..., V), their
	// log-sum-exp lse (...), the targets (...) and the loss's cotangent g (...).
	CrossEntropyGrader interface {
		CrossEntropyGrad(x, lse, targets, g *Array) (Handle, error)
	}
	// LowRankAdder computes AddLowRank in one pass for float32 arrays and a few
	// rows of x: y (..., N) + scale·(x (..., K) @ a (K, R)) @ b (R, N).
	LowRankAdder interface {
		AddLowRank(y, x, a, b *Array, scale float32) (Handle, error)
	}
	// Grader is implemented by backends with their own autodiff (MLX).
	Grader interface {
		ValueAndGrad(f func(params []*Array) []*Array, params []*Array) (outs, grads []*Array, err error)
	}
	// StopGradienter is implemented by backends with their own autodiff, so that
	// StopGradient also cuts their graph, not only ours.
	StopGradienter interface {
		StopGradient(x *Array) (Handle, error)
	}
	// MemoryReporter reports bytes held by the backend.
	MemoryReporter interface{ Memory() (active, peak int64) }
	// PeakResetter restarts the backend's peak from what it holds now.
	PeakResetter interface{ ResetPeakMemory() }
	// Freer releases an array's memory before the garbage collector finds
	// it unreachable (MLX, whose arrays live outside the Go heap).
	Freer interface{ Free(x *Array) }
	// CacheClearer gives memory kept for reuse back to the system.
	CacheClearer interface{ ClearCache() error }
	// Sweeper frees on request what unreachable arrays hold, where a
	// collection and its cleanups alone do not (MLX drains its free queue).
	Sweeper interface{ Sweep() }
	// Runner is implemented by backends that issue every op from one thread
	// of their own (MLX): Run calls f on that thread, so the ops f issues go
	// straight to the library instead of being handed over one by one.
	Runner interface{ Run(f func()) }
)

// Opener makes a backend, or returns an error wrapping ErrUnavailable.
type Opener func() (Backend, error)

var (
	regMu    sync.Mutex
	openers  = map[string]Opener{}
	priority = map[string]int{}
	opened   = map[string]Backend{}
	def      Backend
)

// Register makes a backend available by name. Higher priority wins under "auto".
// It is meant to be called from a backend package's init.
func Register(name string, prio int, open Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := openers[name]; dup {
		panic("mlxbridge: Register called twice for " + name)
	}
	openers[name] = open
	priority[name] = prio
}

// Backends lists the registered backend names, best first.
func Backends() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(openers))
	for n := range openers {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if priority[names[i]] != priority[names[j]] {
			return priority[names[i]] > priority[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// Open returns the named backend, opening it once. "auto" (or "") tries every
// registered backend best first and returns the first that opens; the environment
// variable INLOOP_BACKEND overrides "auto".
func Open(name string) (Backend, error) {
	if name == "" || name == "auto" {
		if env := os.Getenv("INLOOP_BACKEND"); env != "" && env != "auto" {
			return Open(env)
		}
		var errs []error
		for _, n := range Backends() {
			b, err := Open(n)
			if err == nil {
				return b, nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("mlxbridge: no backend registered (import mlxbridge/cpu)")
		}
		return nil, errors.Join(errs...)
	}
	regMu.Lock()
	defer regMu.Unlock()
	if b, ok := opened[name]; ok {
		return b, nil
	}
	open, ok := openers[name]
	if !ok {
		return nil, fmt.Errorf("mlxbridge: unknown backend %q", name)
	}
	b, err := open()
	if err != nil {
		return nil, fmt.Errorf("mlxbridge: backend %s: %w", name, err)
	}
	opened[name] = b
	return b, nil
}

// SetDefault makes b the backend that constructors without an explicit backend use.
func SetDefault(b Backend) {
	regMu.Lock()
	def = b
	regMu.Unlock()
}

// Default returns the default backend, opening "auto" on first use. It panics only
// when no backend is registered at all, which is a build mistake.
func Default() Backend {
	regMu.Lock()
	b := def
	regMu.Unlock()
	if b != nil {
		return b
	}
	b, err := Open("auto")
	if err != nil {
		panic(err)
	}
	SetDefault(b)
	return b
}

// ResetPeakMemory restarts b's peak (Memory's second figure) from what b holds now, where
// b can: a benchmark or a job measures its own peak, not the process's. It reports
// whether b could.
func ResetPeakMemory(b Backend) bool {
	if r, ok := b.(PeakResetter); ok {
		r.ResetPeakMemory()
		return true
	}
	return false
}

// Run calls f where b issues its ops (b's own thread, for a Runner; the
// calling goroutine otherwise) and returns when f does. A decoding step or a
// training step issues hundreds of ops: run as one f, they skip a hand-over
// each. f must not wait on another goroutine that issues ops on b (it would
// wait for the thread f holds); a panic in f is raised again in the caller.
func Run(b Backend, f func()) {
	if r, ok := b.(Runner); ok {
		r.Run(f)
		return
	}
	f()
}

// ClearCache gives the memory b keeps for reuse (freed arrays' buffers) back to
// the system, where b keeps any: after a big job, or before measuring one.
func ClearCache(b Backend) error {
	if c, ok := b.(CacheClearer); ok {
		return c.ClearCache()
	}
	return nil
}

// Sweep frees the memory of b's arrays that are no longer reachable now, rather
// than when the collector gets to them: see Collect, and Sweeper.
func Sweep(b Backend) {
	if s, ok := b.(Sweeper); ok {
		s.Sweep()
		return
	}
	Collect()
}

// Collect runs a garbage collection, waits for the cleanups it queues (arrays
// free their buffers in cleanups) and collects again what they released.
func Collect() {
	done := make(chan struct{})
	func() {
		marker := &struct{ _ [64]byte }{} // not a tiny allocation, so it is collected alone
		runtime.AddCleanup(marker, func(ch chan struct{}) { close(ch) }, done)
	}()
	runtime.GC()
	select { // cleanups queued by one cycle run in order on the cleanup goroutine
	case <-done:
	case <-time.After(time.Second):
	}
	runtime.GC()
}

// Memory reports the bytes a backend holds, where it can tell.
func Memory(b Backend) (active, peak int64, ok bool) {
	if m, ok := b.(MemoryReporter); ok {
		a, p := m.Memory()
		return a, p, true
	}
	return 0, 0, false
}
