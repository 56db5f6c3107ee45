package mlxbridge

// Checkpoints trade computation for memory in the reverse pass. An op's
// vjp keeps its inputs alive until the backward pass reaches it, so a
// transformer's forward pass holds every block's intermediates at once:
// for Qwen3-0.6B at 512 tokens, gigabytes. A checkpointed function keeps
// only what it was given and lets its intermediates go as soon as it
// returns; the backward pass gets their effect back in one of two ways:
//
//   - Checkpoint runs the function again when the backward pass reaches its
//     output and propagates through that fresh graph (one more forward pass of
//     the function);
//   - CheckpointScalar, for a function whose output is a scalar that the loss
//     adds up (one chunk of a cross-entropy), takes the gradient of that
//     output right away, while the function's intermediates are at hand, and
//     keeps only the cotangents of what the function read; the backward pass
//     scales them by the output's cotangent. Nothing runs twice.
//
// Both see every traced array the function reads, the ones it closes over
// (a layer's adapter weights) as well as x: the arrays whose nodes were made
// before the function ran are its inputs in the graph. Backends with their own
// autodiff (Grader) run the function plainly.

// Checkpoints reports whether Checkpoint and CheckpointScalar save memory on b: they
// do wherever this package differentiates; a backend with its own autodiff (MLX)
// runs the function plainly and keeps what its autodiff keeps.
func Checkpoints(b Backend) bool {
	_, own := b.(Grader)
	return !own
}

// FusesCrossEntropy reports whether CrossEntropy's backward on b is one op
// (CrossEntropyGrader under this package's autodiff), which holds the logits'
// gradient and nothing else the size of the logits.
func FusesCrossEntropy(b Backend) bool {
	_, ok := b.(CrossEntropyGrader)
	return ok && Checkpoints(b)
}

// Checkpoint returns f(x), recording for the reverse pass only x and the
// traced arrays f reads; the backward pass calls f again. f must compute the
// same thing each time it is called with x (the same dropout masks, say),
// and only with ops of this package.
func Checkpoint(f func(x *Array) *Array, x *Array) *Array {
	return checkpoint(f, x, false)
}

// CheckpointScalar is Checkpoint for an f whose result has one element: its
// gradient with respect to what f reads is computed at once and kept, so the
// backward pass does not call f again. When those gradients would hold more
// than x itself does besides x's own (a loss chunk that reads a trained
// output projection), it falls back to Checkpoint, to keep the memory it is
// there to save.
func CheckpointScalar(f func(x *Array) *Array, x *Array) *Array {
	return checkpoint(f, x, true)
}

func checkpoint(f func(*Array) *Array, x *Array, eager bool) *Array {
	if x == nil || x.err != nil {
		return x
	}
	if !Checkpoints(x.b) {
		return f(x)
	}
	start := nodeSeq.Load()
	out := f(x)
	if out == nil || out.err != nil || out.node == nil || out.node.seq <= start {
		return out // f read nothing traced, or returned what it was given
	}
	made := func(s uint64) func(*node) bool { return func(n *node) bool { return n.seq > s } }
	ext := frontier(out.node, start)
	res := &Array{b: out.b, h: out.h, shape: out.shape, dtype: out.dtype}
	if eager && out.Size() == 1 {
		cots := propagate(out.node, Full(out.b, out.shape, 1, out.dtype), made(start))
		saved := make([]*Array, len(ext))
		var extra int64
		for i, e := range ext {
			if c := cots[e.node]; c != nil {
				saved[i] = StopGradient(c)
				if e != x && e.node != x.node {
					extra += c.Nbytes()
				}
			}
		}
		if extra <= x.Nbytes() {
			res.node = newNode(ext, func(g *Array) []*Array {
				gs := make([]*Array, len(saved))
				for i, c := range saved {
					if c != nil {
						gs[i] = Mul(c, Reshape(AsType(g, c.dtype))) // g as a 0-d array broadcasts
					}
				}
				return gs
			}, -1)
			return res
		}
	}
	res.node = newNode(ext, func(g *Array) []*Array {
		s := nodeSeq.Load()
		o := f(x)
		if o == nil || o.err != nil {
			return []*Array{o}
		}
		if o.node == nil || o.node.seq <= s {
			return nil
		}
		cots := propagate(o.node, g, made(s))
		gs := make([]*Array, len(ext))
		for i, e := range ext {
			gs[i] = cots[e.node]
		}
		return gs
	}, -1)
	return res
}

// frontier lists the traced arrays the graph below root reads that were
// made at or before node start: the inputs of a checkpointed function.
func frontier(root *node, start uint64) []*Array {
	var ext []*Array
	seen := map[*node]bool{root: true}
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, in := range n.inputs {
			if in == nil || in.node == nil || seen[in.node] {
				continue
			}
			seen[in.node] = true
			if in.node.seq <= start {
				ext = append(ext, in)
			} else {
				stack = append(stack, in.node)
			}
		}
	}
	return ext
}
