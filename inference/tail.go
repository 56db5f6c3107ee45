package inference

import (
	"sync"
	"sync/atomic"

	mx "github.com/inloop/inloop/mlxbridge"
)

// blockTail is what every block here does after attention: the output projection
// o onto the residual x, then the MLP over the post-attention norm onto that
// residual. While decoding (one position a sequence) on a backend that compiles
// functions (MLX) it is one compiled call instead of about ten ops, each a trip
// from Go into the library: most of what building a decoding step costs the host,
// which on a GPU bounds how fast a small model decodes. A layer with adapters,
// or any longer input, runs the ops as they are.
type blockTail struct {
	mu   sync.Mutex
	spec tailSpec
	c    *mx.Compiled
}

// compileTails lets tests compare the compiled tail with the ops.
var compileTails = true

// forward is x + O(o) = h, then h + MLP(norm(h)).
func (t *blockTail) forward(x, o *mx.Array, out *Linear, norm *RMSNorm, mlp *SwiGLU) *mx.Array {
	if compileTails && x.Err() == nil && x.Dim(1) == 1 {
		if c, in := t.compiled(x, o, out, norm, mlp); c != nil {
			return c.Call(in...)[0]
		}
	}
	return tail(x, o, out, norm, mlp)
}

func tail(x, o *mx.Array, out *Linear, norm *RMSNorm, mlp *SwiGLU) *mx.Array {
	h := mx.Add(x, out.Forward(o))
	return mx.Add(h, mlp.Forward(norm.Forward(h)))
}

// tailSpec is what a compiled tail's trace holds besides its inputs' shapes and
// dtypes: the layers' layout. The arrays themselves are the call's inputs, so
// swapped or fused weights need no new trace.
type tailSpec struct {
	lin [4]linearSpec // O, gate, up, down
	eps float32
}

// linearSpec is one Linear's layout, without its arrays.
type linearSpec struct {
	in, out          int
	quantized, bias  bool
	groupSize, bits  int
	int8, hasAdapter bool
}

func specOf(l *Linear) linearSpec {
	q := l.quantized()
	return linearSpec{in: l.In, out: l.Out, quantized: q, bias: l.Bias != nil, groupSize: l.GroupSize, bits: l.Bits,
		int8: q && l.int8.Load(), hasAdapter: len(l.adapters) > 0}
}

// arrays appends l's arrays in the order rebuild takes them back.
func (s linearSpec) arrays(in []*mx.Array, l *Linear) []*mx.Array {
	in = append(in, l.Weight)
	if s.quantized {
		in = append(in, l.Scales, l.Biases)
	}
	if s.bias {
		in = append(in, l.Bias)
	}
	return in
}

// rebuild is a Linear of layout s over the arrays at the front of in, and the rest.
func (s linearSpec) rebuild(in []*mx.Array) (*Linear, []*mx.Array) {
	l := &Linear{In: s.in, Out: s.out, Weight: in[0], GroupSize: s.groupSize, Bits: s.bits, int8: new(atomic.Bool)}
	l.int8.Store(s.int8)
	in = in[1:]
	if s.quantized {
		l.Scales, l.Biases, in = in[0], in[1], in[2:]
	}
	if s.bias {
		l.Bias, in = in[0], in[1:]
	}
	return l, in
}

// compiled is the compiled tail for the layers' present layout and its inputs,
// or nil where the tail runs as ops: the backend does not compile, or a layer
// has adapters.
func (t *blockTail) compiled(x, o *mx.Array, out *Linear, norm *RMSNorm, mlp *SwiGLU) (*mx.Compiled, []*mx.Array) {
	if _, ok := x.Backend().(mx.Compiler); !ok {
		return nil, nil
	}
	ls := [4]*Linear{out, mlp.Gate, mlp.Up, mlp.Down}
	spec := tailSpec{eps: norm.Eps}
	in := make([]*mx.Array, 0, 16)
	in = append(in, x, o, norm.Weight)
	for i, l := range ls {
		spec.lin[i] = specOf(l)
		if spec.lin[i].hasAdapter {
			return nil, nil
		}
		in = spec.lin[i].arrays(in, l)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.c == nil || t.spec != spec {
		t.spec, t.c = spec, mx.Compile(x.Backend(), 1, spec.fn())
	}
	if !t.c.Compiles() {
		return nil, nil
	}
	return t.c, in
}

// fn is the tail as a function of its inputs alone: x, o, the norm's weight, then
// each layer's arrays.
func (s tailSpec) fn() func(in []*mx.Array) []*mx.Array {
	return func(in []*mx.Array) []*mx.Array {
		x, o, norm := in[0], in[1], &RMSNorm{Weight: in[2], Eps: s.eps}
		var ls [4]*Linear
		rest := in[3:]
		for i, ls2 := range s.lin {
			ls[i], rest = ls2.rebuild(rest)
		}
		return []*mx.Array{tail(x, o, ls[0], norm, &SwiGLU{Gate: ls[1], Up: ls[2], Down: ls[3]})}
	}
}
