package deltamem

import (
	"fmt"
	"math"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// Two implementations of the same layer step, tested against each other:
// liveHook for chat time (one session, no gradients: the 8×8 recurrence runs
// in Go on the projected numbers, so a decode step costs one small product, a
// read back and the two corrections) and tracedHook for training (batches of
// sessions, every step in bridge ops so that ValueAndGrad differentiates
// through the state from the text that wrote it to the question that reads it).

// Attach installs mem in every memory layer of c, reading and writing st as
// the cache's session processes tokens. st must come from mem (NewState, or a
// stored one that Fits). Detach removes it; until then st belongs to the
// cache's goroutine.
func (mem *Memory) Attach(m *inference.Model, c *inference.Cache, st *State) error {
	if err := mem.check(m); err != nil {
		return err
	}
	if err := mem.Fits(st); err != nil {
		return err
	}
	if c.NumLayers() != mem.nLay {
		return fmt.Errorf("deltamem: attach: the cache has %d layers, the memory's model %d", c.NumLayers(), mem.nLay)
	}
	for i, l := range mem.layers {
		h := &liveHook{mem: mem, i: i, st: st,
			proj: mem.params[paramName(l, "proj")], bias: mem.params[paramName(l, "proj_bias")],
			uq: mem.params[paramName(l, "query_out")], uo: mem.params[paramName(l, "attn_out")]}
		if err := c.SetHook(l, h); err != nil {
			return err
		}
	}
	return nil
}

// Detach removes every hook from c: the cache computes the plain model again.
func Detach(c *inference.Cache) {
	for i := range c.NumLayers() {
		c.SetHook(i, nil)
	}
}

type liveHook struct {
	mem                *Memory
	i                  int // index among the memory's layers
	st                 *State
	proj, bias, uq, uo *mx.Array
}

func (h *liveHook) Attend(x, q *mx.Array, attend func(*mx.Array) *mx.Array) *mx.Array {
	if err := x.Err(); err != nil {
		return x
	}
	if x.Dim(0) != 1 {
		return mx.Errorf("deltamem: a chat memory reads one sequence at a time, got a batch of %d", x.Dim(0))
	}
	t0 := time.Now()
	l, r := x.Dim(1), h.mem.rank
	z, err := mx.Add(mx.Matmul(mx.AsType(x, mx.Float32), h.proj), h.bias).Float32s() // (1, L, 5r)
	if err != nil {
		return mx.ErrorArray(fmt.Errorf("deltamem: %w", err))
	}
	reads := make([]float32, l*r)
	stepState(h.st.S[h.i], h.st.Prev[h.i], z, reads, r)
	if h.i == 0 {
		h.st.Writes += int64(l)
	}
	rd := mx.FromData(x.Backend(), mx.Float32, reads, 1, l, r)
	dq := heads(mx.Matmul(rd, h.uq), h.mem.heads, h.mem.headD) // (1, Hq, L, D)
	q = mx.Add(q, mx.AsType(dq, q.DType()))
	h.st.spent += time.Since(t0)
	o := attend(q)
	t1 := time.Now()
	do := heads(mx.Matmul(rd, h.uo), h.mem.heads, h.mem.headD)
	o = mx.Add(o, mx.AsType(do, o.DType()))
	// On the cpu backend every op has run by now; on a lazy one (MLX) Spent
	// counts building the graph, and the projection's read back above waits.
	h.st.spent += time.Since(t1)
	return o
}

// stepState runs the memory over the L positions of z (L × 5r projections:
// key, value, query, α, β), updating s (r×r) and prev (r) in place and writing
// each position's read r_t = S_{t-1} q_t into reads (L × r). float64 inside.
func stepState(s, prev, z, reads []float32, r int) {
	k, q := make([]float64, r), make([]float64, r)
	sk := make([]float64, r)
	for t := 0; t*5*r < len(z); t++ {
		zt := z[t*5*r : (t+1)*5*r]
		normInto(k, prev)
		normInto(q, zt[2*r:3*r])
		for a := 0; a < r; a++ { // read before write
			var rd, skA float64
			row := s[a*r : (a+1)*r]
			for c := 0; c < r; c++ {
				rd += float64(row[c]) * q[c]
				skA += float64(row[c]) * k[c]
			}
			reads[t*r+a] = float32(rd)
			sk[a] = skA
		}
		for a := 0; a < r; a++ {
			alpha, beta := sigmoid(zt[3*r+a]), sigmoid(zt[4*r+a])
			d := beta * (sk[a] - float64(zt[r+a])) // β(Sk − v), row a
			row := s[a*r : (a+1)*r]
			for c := 0; c < r; c++ {
				row[c] = float32(alpha*float64(row[c]) - d*k[c])
			}
		}
		copy(prev, zt[:r])
	}
}

func normInto(dst []float64, x []float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss+normEps)
	for i, v := range x {
		dst[i] = float64(v) * inv
	}
}

func sigmoid(x float32) float64 { return 1 / (1 + math.Exp(-float64(x))) }

// heads turns (B, L, H·D) into (B, H, L, D).
func heads(x *mx.Array, h, d int) *mx.Array {
	b, l := x.Dim(0), x.Dim(1)
	x = mx.Reshape(x, b, l, h, d)
	if l == 1 {
		return mx.Reshape(x, b, h, 1, d)
	}
	return mx.Transpose(x, 0, 2, 1, 3)
}

// tracedState is the memory of a batch of sequences during training: S (B, r, r)
// and the last key projection (B, 1, r) of each layer, as arrays that gradients
// flow through.
type tracedState struct {
	s, prev []*mx.Array
}

type tracedHook struct {
	mem                *Memory
	i                  int
	st                 *tracedState
	proj, bias, uq, uo *mx.Array
}

// attachTraced installs mem, computing with its (possibly traced) arrays, in c
// for a batch of b sequences that start with an empty memory.
func (mem *Memory) attachTraced(c *inference.Cache, b int, backend mx.Backend) (*tracedState, error) {
	st := &tracedState{}
	for i, l := range mem.layers {
		st.s = append(st.s, mx.Full(backend, []int{b, mem.rank, mem.rank}, 0, mx.Float32))
		st.prev = append(st.prev, mx.Full(backend, []int{b, 1, mem.rank}, 0, mx.Float32))
		h := &tracedHook{mem: mem, i: i, st: st,
			proj: mem.params[paramName(l, "proj")], bias: mem.params[paramName(l, "proj_bias")],
			uq: mem.params[paramName(l, "query_out")], uo: mem.params[paramName(l, "attn_out")]}
		if err := c.SetHook(l, h); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func (h *tracedHook) Attend(x, q *mx.Array, attend func(*mx.Array) *mx.Array) *mx.Array {
	if err := x.Err(); err != nil {
		return x
	}
	b, l, r := x.Dim(0), x.Dim(1), h.mem.rank
	z := mx.Add(mx.Matmul(mx.AsType(x, mx.Float32), h.proj), h.bias) // (B, L, 5r)
	kraw := mx.SliceAxis(z, -1, 0, r)                                // (B, L, r)
	kprev := h.st.prev[h.i]                                          // keys come from the position before
	if l > 1 {
		kprev = mx.Concatenate([]*mx.Array{kprev, mx.SliceAxis(kraw, 1, 0, l-1)}, 1)
	}
	k := l2norm(kprev)
	v := mx.SliceAxis(z, -1, r, 2*r)
	qm := l2norm(mx.SliceAxis(z, -1, 2*r, 3*r))
	alpha := mx.Sigmoid(mx.SliceAxis(z, -1, 3*r, 4*r))
	beta := mx.Sigmoid(mx.SliceAxis(z, -1, 4*r, 5*r))
	h.st.prev[h.i] = mx.SliceAxis(kraw, 1, l-1, l)

	s := h.st.s[h.i]
	col := func(a *mx.Array, t int) *mx.Array { return mx.Reshape(mx.SliceAxis(a, 1, t, t+1), b, r, 1) }
	reads := make([]*mx.Array, l)
	for t := range l {
		kt := col(k, t)
		reads[t] = mx.Matmul(s, col(qm, t)) // (B, r, 1), read before write
		d := mx.Mul(col(beta, t), mx.Sub(mx.Matmul(s, kt), col(v, t)))
		s = mx.Sub(mx.Mul(col(alpha, t), s), mx.Matmul(d, mx.Reshape(kt, b, 1, r)))
	}
	h.st.s[h.i] = s
	rd := mx.Reshape(mx.Concatenate(reads, 2), b, r, l) // (B, r, L)
	rd = mx.Transpose(rd, 0, 2, 1)                      // (B, L, r)
	dq := heads(mx.Matmul(rd, h.uq), h.mem.heads, h.mem.headD)
	o := attend(mx.Add(q, mx.AsType(dq, q.DType())))
	do := heads(mx.Matmul(rd, h.uo), h.mem.heads, h.mem.headD)
	return mx.Add(o, mx.AsType(do, o.DType()))
}

// l2norm divides each vector of the last axis by √(‖x‖² + ε).
func l2norm(x *mx.Array) *mx.Array {
	return mx.Mul(x, mx.Rsqrt(mx.AddScalar(mx.Sum(mx.Square(x), []int{-1}, true), normEps)))
}
