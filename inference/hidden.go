package inference

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
)

// OutputRows returns the rows of the output projection for the given token ids,
// dense float32 (len(ids), hidden): logits[t] = Hidden(tokens)·OutputRows([t])ᵀ,
// whether the head is tied to the embedding or not, dense or quantized. A
// decision head starts from these rows, so that before any training it scores
// options exactly as restricted decoding of their first tokens would.
func (m *Model) OutputRows(ids []int) (*mx.Array, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("inference: output rows: no token ids")
	}
	idx := make([]int32, len(ids))
	for i, t := range ids {
		if t < 0 || t >= m.cfg.VocabSize {
			return nil, fmt.Errorf("inference: output rows: token id %d outside the vocabulary (%d)", t, m.cfg.VocabSize)
		}
		idx[i] = int32(t)
	}
	at := mx.FromData(m.b, mx.Int32, idx, len(idx))
	w, scales, biases, group, bits := m.Embed.Weight, m.Embed.Scales, m.Embed.Biases, m.Embed.GroupSize, m.Embed.Bits
	if m.LMHead != nil {
		w, scales, biases, group, bits = m.LMHead.Weight, m.LMHead.Scales, m.LMHead.Biases, m.LMHead.GroupSize, m.LMHead.Bits
	}
	rows := mx.Take(w, at, 0)
	if scales != nil {
		act := m.Embed.dtype // as Embedding.rowScales: in the activations' dtype
		rows = mx.Dequantize(rows, mx.AsType(mx.Take(scales, at, 0), act), mx.AsType(mx.Take(biases, at, 0), act), group, bits)
	}
	rows = mx.AsType(rows, mx.Float32)
	if err := mx.Eval(rows); err != nil {
		return nil, fmt.Errorf("inference: output rows: %w", err)
	}
	return rows, nil
}
