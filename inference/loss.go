package inference

import (
	"slices"

	mx "github.com/inloop/inloop/mlxbridge"
)

// LossOptions choose how Loss trades computation for memory while it is
// differentiated. Neither changes the loss or its gradient beyond float32
// rounding.
type LossOptions struct {
	// CheckpointBlocks keeps only each block's input for the backward pass,
	// which runs the block again: the activations of one block are held
	// instead of all of them, for one more forward pass of the blocks (about a
	// third more time per step). mlx-lm calls it grad_checkpoint.
	CheckpointBlocks bool
	// ChunkRows is how many positions the output projection and the
	// cross-entropy take at a time; each chunk's gradient is taken as soon as
	// its loss is, so only one chunk's logits are ever held. 0 picks chunks of
	// about LossChunkBytes of logits.
	ChunkRows int
}

// LossChunkBytes is the size of the logits of one chunk Loss takes by
// default: 64 MiB is 110 positions of Qwen3's 151,936-word vocabulary, where
// the whole of a 512-token row is 311 MB, and held several times over (logits,
// their log-sum-exp, the gradient) without chunks.
const LossChunkBytes = 64 << 20

// Loss is the mean next-token cross-entropy of the model on tokens (B, L)
// against targets (B, L), over the positions where mask (B, L) is nonzero,
// each weighted by its mask value: what mx.CrossEntropyMasked of Forward's
// logits gives, computed without ever holding the logits of every position.
// Positions with a zero mask (a prompt the row does not learn) are never
// projected onto the vocabulary at all. Without tracing (an evaluation) it
// computes the same numbers with the same memory.
func (m *Model) Loss(tokens, targets, mask *mx.Array, o LossOptions) *mx.Array {
	for _, a := range []*mx.Array{tokens, targets, mask} {
		if err := a.Err(); err != nil {
			return a
		}
	}
	if !slices.Equal(tokens.Shape(), targets.Shape()) || !slices.Equal(tokens.Shape(), mask.Shape()) || tokens.Ndim() != 2 {
		return mx.Errorf("inference: loss of tokens %v, targets %v and mask %v: want three (B, L) arrays", tokens.Shape(), targets.Shape(), mask.Shape())
	}
	if o.ChunkRows < 0 {
		return mx.Errorf("inference: loss chunks of %d rows", o.ChunkRows)
	}
	weights, err := mx.AsType(mask, mx.Float32).Float32s()
	if err != nil {
		return mx.Errorf("inference: loss: %w", err)
	}
	ids, err := mx.AsType(targets, mx.Int32).Int32s()
	if err != nil {
		return mx.Errorf("inference: loss: %w", err)
	}
	// The learned positions, in order, with their targets and weights.
	var rows, tgt []int32
	var w []float32
	var total float64
	for i, v := range weights {
		if v != 0 {
			rows, tgt, w = append(rows, int32(i)), append(tgt, ids[i]), append(w, v)
			total += float64(v)
		}
	}
	b := m.b
	if len(rows) == 0 {
		return mx.Full(b, nil, 0, mx.Float32) // as CrossEntropyMasked gives; every gradient zero
	}
	h := m.hiddenWith(tokens, nil, o.CheckpointBlocks, false)
	if h.Err() != nil {
		return h
	}
	hid := h.Dim(2)
	flat := mx.Reshape(h, h.Dim(0)*h.Dim(1), hid)
	if len(rows) < len(weights) {
		flat = mx.Take(flat, mx.FromData(b, mx.Int32, rows, len(rows)), 0)
	}
	return mx.MulScalar(m.chunkedLoss(flat, tgt, w, o.ChunkRows), float32(1/max(total, 1)))
}

// weightedCE is Σ wt[i] · cross-entropy(head(x[i]), t[i]) over the rows of x.
func (m *Model) weightedCE(x, t, wt *mx.Array) *mx.Array {
	return mx.Sum(mx.Mul(mx.CrossEntropy(m.head(x), t), wt), nil, false)
}

// targets are tgt and w as arrays for weightedCE.
func (m *Model) targets(tgt []int32, w []float32) (t, wt *mx.Array) {
	return mx.FromData(m.b, mx.Int32, tgt, len(tgt)), mx.FromData(m.b, mx.Float32, w, len(w))
}

// lossChunk is the chunk of positions Loss takes: chunk, or for 0 about
// LossChunkBytes of logits.
func (m *Model) lossChunk(chunk int) int {
	if chunk == 0 {
		chunk = max(32, LossChunkBytes/(4*m.cfg.VocabSize))
	}
	return chunk
}

// chunkedLoss is Σ w[i] · cross-entropy(head(x[i]), tgt[i]) over the rows of x
// (n, hidden), chunk rows at a time (0: about LossChunkBytes of logits), each
// chunk's head and loss recomputed in the backward pass (mx.CheckpointScalar),
// so only one chunk's logits are held.
func (m *Model) chunkedLoss(x *mx.Array, tgt []int32, w []float32, chunk int) *mx.Array {
	chunk = m.lossChunk(chunk)
	var sum *mx.Array
	for a := 0; a < len(tgt); a += chunk {
		e := min(a+chunk, len(tgt))
		t, wt := m.targets(tgt[a:e], w[a:e])
		part := mx.CheckpointScalar(func(x *mx.Array) *mx.Array { return m.weightedCE(x, t, wt) }, mx.SliceAxis(x, 0, a, e))
		if sum == nil {
			sum = part
		} else {
			sum = mx.Add(sum, part)
		}
	}
	return sum
}
