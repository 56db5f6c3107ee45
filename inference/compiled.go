package inference

import (
	"sync"

	mx "github.com/inloop/inloop/mlxbridge"
)

// While decoding (one position a sequence) on a backend that compiles functions
// (MLX), a block is two compiled calls and the ops between them that depend on
// the position: its head (the input norm, the query, key and value projections
// split into heads) and its tail (the output projection, residual, post-attention
// norm, MLP and residual). Each replaces about ten ops, each a trip from Go into
// the library: most of what building a decoding step costs the host, which on a
// GPU bounds how fast a small model decodes. The layers' arrays, their adapters'
// included, are the calls' inputs, so a trace holds no weights and an updated
// adapter (test-time training's, a correction's step) needs no new trace; a
// layer with more than maxAdapters adapters or with dropout (training), a cache
// with an attention hook, or more than one position runs the ops as they are.

// compileBlocks lets tests compare the compiled pieces with the ops.
var compileBlocks = true

// segment keeps one compiled piece of a block for the layout of its layers
// (a comparable spec: which arrays are present, sizes, settings).
type segment struct {
	mu   sync.Mutex
	spec any
	c    *mx.Compiled
}

// get is the compiled function for spec, made from fn's function where the spec
// changed, or nil where b did not compile it. The lock is not held while the
// backend makes it: a block decoding on the backend's thread may wait for it.
func (s *segment) get(b mx.Backend, outs int, spec any, fn func() func([]*mx.Array) []*mx.Array) *mx.Compiled {
	s.mu.Lock()
	c := s.c
	if s.spec != spec {
		c = nil
	}
	s.mu.Unlock()
	if c == nil {
		c = mx.Compile(b, outs, fn())
		s.mu.Lock()
		s.spec, s.c = spec, c
		s.mu.Unlock()
	}
	if !c.Compiles() {
		return nil
	}
	return c
}

// decoding reports whether x (B, L, hidden) takes the compiled pieces: one
// position, on a backend that compiles.
func decoding(x *mx.Array) bool {
	if !compileBlocks || x.Err() != nil || x.Dim(1) != 1 {
		return false
	}
	_, ok := x.Backend().(mx.Compiler)
	return ok
}

// maxAdapters is the most adapters a layer of a compiled piece takes (a user's
// adapter under test-time training's, say); a deeper stack runs as ops.
const maxAdapters = 4

// linearSpec is one Linear's layout, without its arrays: its adapters' scales
// (their A and B are inputs), the first adapters of them.
type linearSpec struct {
	in, out         int
	quantized, bias bool
	groupSize, bits int
	int8, int8Rows  bool // the model's int8 choices, for one row and for many
	bf16Rows        bool // and its bfloat16 choice for many rows (a dense layer)
	adapters        int
	scales          [maxAdapters]float32
}

// specOf is l's layout; ok is false where the piece cannot hold it: too many
// adapters, or one with dropout (training).
func specOf(l *Linear) (s linearSpec, ok bool) {
	q := l.quantized()
	s = linearSpec{in: l.In, out: l.Out, quantized: q, bias: l.Bias != nil, groupSize: l.GroupSize, bits: l.Bits,
		int8: q && l.act.decode.Load(), int8Rows: q && l.act.prefill.Load(),
		bf16Rows: !q && l.act.bf16.Load(), adapters: len(l.adapters)}
	if s.adapters > maxAdapters {
		return s, false
	}
	for i, lo := range l.adapters {
		if lo.Drop != nil {
			return s, false
		}
		s.scales[i] = lo.Scale
	}
	return s, true
}

// specsOf is the layouts of ls and their arrays appended to in, in the order
// rebuild takes them back; ok is false where a layer's layout cannot be held.
func specsOf(in []*mx.Array, ls ...*Linear) (specs []linearSpec, _ []*mx.Array, ok bool) {
	for _, l := range ls {
		s, ok := specOf(l)
		if !ok {
			return nil, nil, false
		}
		specs = append(specs, s)
		in = append(in, l.Weight)
		if s.quantized {
			in = append(in, l.Scales, l.Biases)
		}
		if s.bias {
			in = append(in, l.Bias)
		}
		for _, lo := range l.adapters {
			in = append(in, lo.A, lo.B)
		}
	}
	return specs, in, true
}

// rebuildAll is rebuild for each layout in turn: the Linears, and the arrays left.
func rebuildAll(specs []linearSpec, in []*mx.Array) ([]*Linear, []*mx.Array) {
	ls := make([]*Linear, len(specs))
	for i, s := range specs {
		ls[i], in = s.rebuild(in)
	}
	return ls, in
}

// rebuild is a Linear of layout s over the arrays at the front of in, and the rest.
func (s linearSpec) rebuild(in []*mx.Array) (*Linear, []*mx.Array) {
	l := &Linear{In: s.in, Out: s.out, Weight: in[0], GroupSize: s.groupSize, Bits: s.bits, act: new(actChoice)}
	l.act.decode.Store(s.int8)
	l.act.prefill.Store(s.int8Rows)
	l.act.bf16.Store(s.bf16Rows)
	in = in[1:]
	if s.quantized {
		l.Scales, l.Biases, in = in[0], in[1], in[2:]
	}
	if s.bias {
		l.Bias, in = in[0], in[1:]
	}
	for i := range s.adapters {
		l.adapters = append(l.adapters, &LoRA{A: in[0], B: in[1], Scale: s.scales[i]})
		in = in[2:]
	}
	return l, in
}

// blockTail is a block's tail: x + O(o) = h, then h + MLP(norm(h)).
type blockTail struct{ segment }

// tailSpec is a compiled tail's layout: O, gate, up, down and the norm's epsilon.
type tailSpec struct {
	lin [4]linearSpec
	eps float32
}

func (t *blockTail) forward(x, o *mx.Array, out *Linear, norm *RMSNorm, mlp *SwiGLU) *mx.Array {
	if !decoding(x) {
		return tail(x, o, out, norm, mlp)
	}
	specs, in, ok := specsOf([]*mx.Array{x, o, norm.Weight}, out, mlp.Gate, mlp.Up, mlp.Down)
	if !ok {
		return tail(x, o, out, norm, mlp)
	}
	spec := tailSpec{lin: [4]linearSpec(specs), eps: norm.Eps}
	c := t.get(x.Backend(), 1, spec, func() func([]*mx.Array) []*mx.Array {
		return func(in []*mx.Array) []*mx.Array {
			ls, _ := rebuildAll(spec.lin[:], in[3:])
			return []*mx.Array{tail(in[0], in[1], ls[0], &RMSNorm{Weight: in[2], Eps: spec.eps}, &SwiGLU{Gate: ls[1], Up: ls[2], Down: ls[3]})}
		}
	})
	if c == nil {
		return tail(x, o, out, norm, mlp)
	}
	return c.Call(in...)[0]
}

func tail(x, o *mx.Array, out *Linear, norm *RMSNorm, mlp *SwiGLU) *mx.Array {
	h := mx.Add(x, out.Forward(o))
	return mx.Add(h, mlp.Forward(norm.Forward(h)))
}

// headLayers are what a block's head computes with: the input norm, the query,
// key and value projections, Qwen3's per-head norms (nil elsewhere), and the
// head counts.
type headLayers struct {
	norm           *RMSNorm
	q, k, v        *Linear
	qNorm, kNorm   *RMSNorm
	heads, kvHeads int
	dim            int
}

// project is the head as ops: x normalized (xn, which an attention hook reads),
// and the queries (B, Hq, L, D), keys and values (B, Hkv, L, D). The per-head
// norms act on each head's D features, so they run before the heads move axes.
func project(x *mx.Array, h headLayers) (xn, q, k, v *mx.Array) {
	b, l := x.Dim(0), x.Dim(1)
	xn = h.norm.Forward(x)
	qkv := forwardAll(xn, h.q, h.k, h.v)
	q, k, v = qkv[0], qkv[1], qkv[2]
	if h.qNorm != nil {
		q = h.qNorm.Forward(mx.Reshape(q, b, l, h.heads, h.dim))
		k = h.kNorm.Forward(mx.Reshape(k, b, l, h.kvHeads, h.dim))
	}
	return xn, splitHeads(q, b, l, h.heads, h.dim), splitHeads(k, b, l, h.kvHeads, h.dim), splitHeads(v, b, l, h.kvHeads, h.dim)
}

// blockHead is a block's head, compiled while decoding where no attention hook
// needs the normalized input (xn is then nil).
type blockHead struct{ segment }

// headSpec is a compiled head's layout.
type headSpec struct {
	lin            [3]linearSpec
	eps            float32
	qkNorm         bool
	qEps, kEps     float32
	heads, kvHeads int
	dim            int
}

func (hd *blockHead) forward(x *mx.Array, h headLayers, c *LayerCache) (xn, q, k, v *mx.Array) {
	if !decoding(x) || (c != nil && c.hook != nil) {
		return project(x, h)
	}
	in := []*mx.Array{x, h.norm.Weight}
	spec := headSpec{eps: h.norm.Eps, qkNorm: h.qNorm != nil, heads: h.heads, kvHeads: h.kvHeads, dim: h.dim}
	if spec.qkNorm {
		in = append(in, h.qNorm.Weight, h.kNorm.Weight)
		spec.qEps, spec.kEps = h.qNorm.Eps, h.kNorm.Eps
	}
	specs, in, ok := specsOf(in, h.q, h.k, h.v)
	if !ok {
		return project(x, h)
	}
	spec.lin = [3]linearSpec(specs)
	cf := hd.get(x.Backend(), 3, spec, func() func([]*mx.Array) []*mx.Array {
		return func(in []*mx.Array) []*mx.Array {
			h := headLayers{norm: &RMSNorm{Weight: in[1], Eps: spec.eps}, heads: spec.heads, kvHeads: spec.kvHeads, dim: spec.dim}
			rest := in[2:]
			if spec.qkNorm {
				h.qNorm, h.kNorm = &RMSNorm{Weight: rest[0], Eps: spec.qEps}, &RMSNorm{Weight: rest[1], Eps: spec.kEps}
				rest = rest[2:]
			}
			ls, _ := rebuildAll(spec.lin[:], rest)
			h.q, h.k, h.v = ls[0], ls[1], ls[2]
			_, q, k, v := project(in[0], h)
			return []*mx.Array{q, k, v}
		}
	})
	if cf == nil {
		return project(x, h)
	}
	qkv := cf.Call(in...)
	return nil, qkv[0], qkv[1], qkv[2]
}
