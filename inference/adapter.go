package inference

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
)

// The adapter stack. A model's linear layers compute
//
//	y = base(x) + Σₖ Scaleₖ·(xAₖ)Bₖ
//
// over a stack of adapters, bottom first: the user's adapter at the bottom, a
// temporary one (test-time training) pushed on top and popped again. Every change
// of the stack gets a new version number, so a Session knows when the keys and
// values it cached were computed with other weights, and the last states are kept,
// so any of them can be restored (undo).
//
// One lock guards the stack against the forward passes that read it: a Session
// holds the read lock for each forward (a prefill, one decode step), every change
// takes the write lock. A change therefore waits for the running decode step and
// never shows a forward half-old, half-new weights.

// ErrNoAdapter reports an adapter operation on a model whose stack is empty.
var ErrNoAdapter = errors.New("inference: the model has no adapter")

// ErrAdapterVersion reports a version the model's history no longer (or never) held.
var ErrAdapterVersion = errors.New("inference: adapter version not in the history")

// DefaultAdapterHistory is how many adapter states a loaded model keeps for
// RestoreVersion, the current one included. Each holds its adapters' arrays alive.
const DefaultAdapterHistory = 8

// Adapter is one level of a model's adapter stack: LoRA updates for some of its
// linear layers, by path ("model.layers.3.self_attn.q_proj"). An Adapter never
// changes once made, so a state that holds it gives the same outputs whenever it is
// restored; the methods that change one return a copy.
type Adapter struct {
	name  string
	loras map[string]*LoRA
}

// NewAdapter makes an adapter from LoRA updates by linear path; name is a label (the
// folder it came from, "ttt"). The map and the LoRA values are copied. Shapes are
// checked when the adapter is pushed onto a model.
func NewAdapter(name string, loras map[string]LoRA) *Adapter {
	a := &Adapter{name: name, loras: make(map[string]*LoRA, len(loras))}
	for p, lo := range loras {
		a.loras[p] = &lo
	}
	return a
}

// Name is the adapter's label.
func (a *Adapter) Name() string { return a.name }

// Paths lists the linear layers the adapter updates, sorted.
func (a *Adapter) Paths() []string { return slices.Sorted(maps.Keys(a.loras)) }

// LoRA returns the update of one linear layer.
func (a *Adapter) LoRA(path string) (LoRA, bool) {
	lo, ok := a.loras[path]
	if !ok {
		return LoRA{}, false
	}
	return *lo, true
}

// Params returns the adapter's weights by mlx-lm's names: "<path>.lora_a" (In, r) and
// "<path>.lora_b" (r, Out).
func (a *Adapter) Params() map[string]*mx.Array {
	out := make(map[string]*mx.Array, 2*len(a.loras))
	for p, lo := range a.loras {
		out[p+".lora_a"], out[p+".lora_b"] = lo.A, lo.B
	}
	return out
}

// WithParams returns a copy of a with the weights named in params (Params' names)
// replaced; each must exist and keep its shape. The arrays may be traced ones
// inside mx.ValueAndGrad.
func (a *Adapter) WithParams(params map[string]*mx.Array) (*Adapter, error) {
	cp := a.clone()
	for name, v := range params {
		path, part, ok := splitParamName(name)
		if !ok {
			return nil, fmt.Errorf("inference: adapter: %q is not an adapter weight (want <path>.lora_a or .lora_b)", name)
		}
		lo := cp.loras[path]
		if lo == nil {
			return nil, fmt.Errorf("inference: adapter: %q has no adapter", path)
		}
		dst := &lo.A
		if part == "b" {
			dst = &lo.B
		}
		if v == nil || !slices.Equal(v.Shape(), (*dst).Shape()) {
			var got []int
			if v != nil {
				got = v.Shape()
			}
			return nil, fmt.Errorf("%w: adapter: %s has shape %v, want %v", ErrTensorShape, name, got, (*dst).Shape())
		}
		*dst = v
	}
	return cp, nil
}

// WithDropout returns a copy of a whose updates pass their input through drop(path)
// (nil or a nil result: no dropout), as mlx-lm's LoRA dropout does in training.
func (a *Adapter) WithDropout(drop func(path string) func(x *mx.Array) *mx.Array) *Adapter {
	cp := a.clone()
	for p, lo := range cp.loras {
		lo.Drop = nil
		if drop != nil {
			lo.Drop = drop(p)
		}
	}
	return cp
}

func (a *Adapter) clone() *Adapter {
	cp := &Adapter{name: a.name, loras: make(map[string]*LoRA, len(a.loras))}
	for p, lo := range a.loras {
		l := *lo
		cp.loras[p] = &l
	}
	return cp
}

func splitParamName(name string) (path, part string, ok bool) {
	switch {
	case strings.HasSuffix(name, ".lora_a"):
		return strings.TrimSuffix(name, ".lora_a"), "a", true
	case strings.HasSuffix(name, ".lora_b"):
		return strings.TrimSuffix(name, ".lora_b"), "b", true
	}
	return "", "", false
}

// AdapterState is a model's adapter stack at one version. The zero value is the
// bare model (no adapters).
type AdapterState struct {
	Version uint64
	stack   []*Adapter // bottom first
}

// Adapters returns the state's stack, bottom first.
func (s AdapterState) Adapters() []*Adapter { return slices.Clone(s.stack) }

// adapterStack is a model's adapters and what guards them.
type adapterStack struct {
	// mu is held for reading by every Session forward and for writing by every
	// change of the stack (which rewrites the Linears' adapter lists).
	mu      sync.RWMutex
	state   atomic.Pointer[AdapterState] // current; replaced, never changed; nil: version 0, none
	history []*AdapterState              // oldest first, the current one last; under mu
	keep    int                          // history length; under mu
}

func (m *Model) adapterState() *AdapterState {
	if s := m.ad.state.Load(); s != nil {
		return s
	}
	return &AdapterState{}
}

// AdapterVersion returns the version of the adapter stack: 0 for a model never
// adapted, then a new, larger number after every change (push, pop, new weights,
// restore, fuse). Equal versions of one model mean bit-identical adapters.
func (m *Model) AdapterVersion() uint64 { return m.adapterState().Version }

// Adapters returns the adapter stack, bottom first.
func (m *Model) Adapters() []*Adapter { return slices.Clone(m.adapterState().stack) }

// TopAdapter returns the adapter on top of the stack (the one training changes), or
// nil.
func (m *Model) TopAdapter() *Adapter {
	s := m.adapterState().stack
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// AdapterSnapshot returns the current adapter state, to restore later.
func (m *Model) AdapterSnapshot() AdapterState { return *m.adapterState() }

// PushAdapter puts a on top of the stack; its updates add to those below. It
// returns the new version.
func (m *Model) PushAdapter(a *Adapter) (uint64, error) {
	if a == nil {
		return m.AdapterVersion(), errors.New("inference: push of a nil adapter")
	}
	return m.changeAdapters(func(cur []*Adapter) ([]*Adapter, error) {
		return append(slices.Clone(cur), a), m.checkAdapter(a)
	})
}

// PopAdapter removes the top adapter and returns it with the new version. The
// adapters below are the very ones that were there before the push, so the model's
// outputs are bit-identical to before it.
func (m *Model) PopAdapter() (*Adapter, uint64, error) {
	var top *Adapter
	v, err := m.changeAdapters(func(cur []*Adapter) ([]*Adapter, error) {
		if len(cur) == 0 {
			return nil, fmt.Errorf("%w to pop", ErrNoAdapter)
		}
		top = cur[len(cur)-1]
		return slices.Clone(cur[:len(cur)-1]), nil
	})
	return top, v, err
}

// ReplaceAdapter puts a in place of the top adapter (onto the empty stack, it pushes
// it) and returns the new version.
func (m *Model) ReplaceAdapter(a *Adapter) (uint64, error) {
	if a == nil {
		return m.AdapterVersion(), errors.New("inference: replace with a nil adapter")
	}
	return m.changeAdapters(func(cur []*Adapter) ([]*Adapter, error) {
		next := slices.Clone(cur)
		if len(next) == 0 {
			next = append(next, a)
		} else {
			next[len(next)-1] = a
		}
		return next, m.checkAdapter(a)
	})
}

// SetAdapterParams replaces weights of the top adapter by name (Adapter.Params'
// names; the others are kept) and returns the new version.
func (m *Model) SetAdapterParams(params map[string]*mx.Array) (uint64, error) {
	return m.changeAdapters(func(cur []*Adapter) ([]*Adapter, error) {
		if len(cur) == 0 {
			return nil, fmt.Errorf("%w to set weights of", ErrNoAdapter)
		}
		top, err := cur[len(cur)-1].WithParams(params)
		if err != nil {
			return nil, err
		}
		next := slices.Clone(cur)
		next[len(next)-1] = top
		return next, nil
	})
}

// RestoreAdapter makes s the current adapter state, under a new version; the
// outputs are bit-identical to when s was current. s may come from a Fork of the
// model (how a trainer publishes what it trained); its adapters are checked
// against this model.
func (m *Model) RestoreAdapter(s AdapterState) (uint64, error) {
	return m.changeAdapters(func([]*Adapter) ([]*Adapter, error) {
		for _, a := range s.stack {
			if err := m.checkAdapter(a); err != nil {
				return nil, err
			}
		}
		return slices.Clone(s.stack), nil
	})
}

// RestoreVersion restores the state that had version v, if the history still holds
// it (see SetAdapterHistory), and returns the new version.
func (m *Model) RestoreVersion(v uint64) (uint64, error) {
	return m.changeAdapters(func([]*Adapter) ([]*Adapter, error) {
		for _, s := range m.ad.history {
			if s.Version == v {
				return slices.Clone(s.stack), nil
			}
		}
		return nil, fmt.Errorf("%w: %d (kept: %v)", ErrAdapterVersion, v, m.historyVersions())
	})
}

// SetAdapterHistory sets how many states RestoreVersion can reach, the current one
// included (DefaultAdapterHistory for a loaded model, 0 for a Fork). 0 keeps none.
func (m *Model) SetAdapterHistory(n int) {
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	m.ad.keep = max(n, 0)
	if len(m.ad.history) == 0 && m.ad.keep > 0 {
		m.ad.history = append(m.ad.history, m.adapterState())
	}
	m.trimHistory()
}

// AdapterHistory lists the versions RestoreVersion can reach, oldest first.
func (m *Model) AdapterHistory() []uint64 {
	m.ad.mu.RLock()
	defer m.ad.mu.RUnlock()
	return m.historyVersions()
}

func (m *Model) historyVersions() []uint64 {
	vs := make([]uint64, len(m.ad.history))
	for i, s := range m.ad.history {
		vs[i] = s.Version
	}
	return vs
}

func (m *Model) trimHistory() {
	if n := len(m.ad.history) - m.ad.keep; n > 0 {
		clear(m.ad.history[:n]) // let the arrays go
		m.ad.history = m.ad.history[n:]
	}
}

// changeAdapters computes the next stack from the current one under the write lock
// and installs it under a new version.
func (m *Model) changeAdapters(next func(cur []*Adapter) ([]*Adapter, error)) (uint64, error) {
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	cur := m.adapterState()
	stack, err := next(cur.stack)
	if err != nil {
		return cur.Version, err
	}
	return m.installLocked(stack), nil
}

// installLocked makes stack current under a new version: every Linear gets its list
// of updates, and the state goes into the history.
func (m *Model) installLocked(stack []*Adapter) uint64 {
	s := &AdapterState{Version: m.adapterState().Version + 1, stack: stack}
	m.setLinearAdapters(stack)
	m.ad.state.Store(s)
	if m.ad.keep > 0 {
		m.ad.history = append(m.ad.history, s)
		m.trimHistory()
	}
	return s.Version
}

// setLinearAdapters gives every Linear the updates stack holds for it, bottom first.
func (m *Model) setLinearAdapters(stack []*Adapter) {
	m.Linears(func(path string, l *Linear) {
		var los []*LoRA
		for _, a := range stack {
			if lo := a.loras[path]; lo != nil {
				los = append(los, lo)
			}
		}
		l.adapters = los
	})
}

// checkAdapter reports an update for a layer m lacks or of the wrong shape.
func (m *Model) checkAdapter(a *Adapter) error {
	if len(a.loras) == 0 {
		return fmt.Errorf("inference: adapter %q updates no layer", a.name)
	}
	linears := map[string]*Linear{}
	m.Linears(func(path string, l *Linear) { linears[path] = l })
	for _, path := range a.Paths() {
		lo, l := a.loras[path], linears[path]
		if l == nil {
			return fmt.Errorf("inference: adapter %q: %q is not a linear layer of this model", a.name, path)
		}
		if lo.A == nil || lo.B == nil {
			return fmt.Errorf("inference: adapter %q: %s lacks lora_a or lora_b", a.name, path)
		}
		sa, sb := lo.A.Shape(), lo.B.Shape()
		if len(sa) != 2 || len(sb) != 2 || sa[0] != l.In || sb[1] != l.Out || sa[1] != sb[0] || sa[1] < 1 {
			return fmt.Errorf("%w: adapter %q: %s has lora_a %v and lora_b %v, want (%d, r) and (r, %d)",
				ErrTensorShape, a.name, path, sa, sb, l.In, l.Out)
		}
	}
	return nil
}

// WithAdapterReadLock runs fn with the adapter stack held still, for forwards that
// do not go through a Session (scoring with a decision head, perplexity) on a model
// whose adapters another goroutine may change. fn gets the version it runs under.
// fn must not change the adapters, use a Session of m or call Fork or WithParams:
// the lock is not reentrant.
func (m *Model) WithAdapterReadLock(fn func(version uint64) error) error {
	m.ad.mu.RLock()
	defer m.ad.mu.RUnlock()
	return fn(m.AdapterVersion())
}

// Fork returns a model that shares m's frozen weights (nothing is copied) but has
// its own adapter stack, starting as m's, its own version counter, lock and no
// history (SetAdapterHistory turns it on).
//
// It is how a trainer changes adapters while m keeps serving a chat. Training sets
// traced arrays into the adapters for every gradient (mx.ValueAndGrad) and new
// weights after every step; done on m itself, a reply running meanwhile would
// decode some tokens with traced or half-stepped weights, and holding m's write lock
// for each training step instead would stall the reply for as long as the step
// takes. On a fork the trainer needs no lock at all, the chat never sees its
// intermediate weights, and it publishes a result in one short write lock:
//
//	work := m.Fork()
//	lora.Apply(work, cfg)              // a fresh adapter over the user's
//	... train: lora.SetParams(work, ...) inside and after each ValueAndGrad ...
//	m.RestoreAdapter(work.AdapterSnapshot()) // or m.PushAdapter(work.TopAdapter())
//
// Test-time training may also answer from a Session of the fork and leave m alone,
// so the chat's own cached prefix stays valid for its next turn.
func (m *Model) Fork() *Model {
	cp, err := m.WithParams(nil)
	if err != nil {
		panic(err) // a model always rebuilds from its own configuration
	}
	return cp
}

// FuseAdapters folds every adapter of the stack into the base weights,
// W' = W + Σₖ Scaleₖ·(AₖBₖ)ᵀ, and empties the stack. A quantized base is
// dequantized, updated and quantized again with its own settings (or left dense
// float32 with dequantize), so the fused model computes what the adapted one did up
// to that rounding. The history is cleared, since its states were adapters over the
// old base. It returns the fused paths.
func (m *Model) FuseAdapters(dequantize bool) ([]string, error) {
	return m.FuseAdaptersWith(FuseOptions{Dequantize: dequantize})
}

// FuseOptions adjusts FuseAdaptersWith.
type FuseOptions struct {
	Dequantize bool // leave fused quantized layers dense, in their scales' dtype
	// Kernel is the MLX quantize kernel whose rounding re-quantizes a fused
	// quantized layer: quant.GPU (what mlx-lm's fuse writes on a Mac) or quant.CPU
	// (on Linux without CUDA). A fused weight sits near the grid it came from, so
	// the two kernels' different rounding of exact ties shows in about 1% of words.
	Kernel quant.Kernel
}

// FuseAdaptersWith is FuseAdapters with options.
func (m *Model) FuseAdaptersWith(o FuseOptions) ([]string, error) {
	dequantize := o.Dequantize
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	type fusedLinear struct {
		l                      *Linear
		weight, scales, biases *mx.Array
	}
	var plan []fusedLinear
	var fused []string
	m.Linears(func(path string, l *Linear) {
		if len(l.adapters) == 0 {
			return
		}
		var delta *mx.Array // (Out, In)
		for _, lo := range l.adapters {
			// (Scale·Bᵀ)·Aᵀ in the adapter's dtype, the order mlx-lm's
			// LoRALinear.fuse rounds in, so a fused weight is bit for bit its.
			d := mx.Matmul(mx.MulScalar(mx.Transpose(lo.B, 1, 0), lo.Scale), mx.Transpose(lo.A, 1, 0))
			if delta == nil {
				delta = d
			} else {
				delta = mx.Add(delta, d)
			}
		}
		f := fusedLinear{l: l}
		switch {
		case l.Scales == nil:
			// In the weight's dtype, as mlx-lm fuses; a 16-bit result is kept
			// compact, as the loader keeps such weights (LoadOptions.DType).
			f.weight = mx.Compact(mx.Add(l.Weight, mx.AsType(delta, l.Weight.DType())))
		case dequantize: // dense in the scales' dtype, as mx.dequantize gives it
			f.weight = mx.Add(mx.Dequantize(l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits), mx.AsType(delta, l.Scales.DType()))
		default:
			w := mx.Add(mx.Dequantize(l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits), mx.AsType(delta, l.Scales.DType()))
			f.weight, f.scales, f.biases = mx.QuantizeWith(w, l.GroupSize, l.Bits, o.Kernel)
		}
		plan = append(plan, f)
		fused = append(fused, path)
	})
	if len(plan) == 0 {
		return nil, fmt.Errorf("%w to fuse", ErrNoAdapter)
	}
	// Compute everything before changing anything: a failure leaves the model as it was.
	for i, f := range plan {
		for _, a := range []*mx.Array{f.weight, f.scales, f.biases} {
			if a != nil {
				if err := mx.Eval(a); err != nil {
					return nil, fmt.Errorf("inference: fuse %s: %w", fused[i], err)
				}
			}
		}
	}
	for _, f := range plan {
		l := f.l
		l.Weight = f.weight
		if l.Scales != nil {
			l.Scales, l.Biases = f.scales, f.biases
			if dequantize {
				l.GroupSize, l.Bits = 0, 0
			}
		}
	}
	clear(m.ad.history) // adapters over the old base
	m.ad.history = m.ad.history[:0]
	m.installLocked(nil)
	return fused, nil
}
