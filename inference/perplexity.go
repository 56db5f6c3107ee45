package inference

import (
	"errors"
	"fmt"
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Perplexity is exp of the mean next-token cross-entropy of ids under m, in
// consecutive windows of window+1 tokens that share no context (each window predicts
// its last window tokens from the ones before them). It is the quantize command's
// before/after measure.
func Perplexity(m *Model, ids []int, window int) (float64, error) {
	if window < 1 {
		return 0, fmt.Errorf("inference: perplexity window %d", window)
	}
	if len(ids) < 2 {
		return 0, errors.New("inference: perplexity needs at least two tokens")
	}
	var nll float64
	var count int
	for start := 0; start+1 < len(ids); start += window {
		end := min(start+window+1, len(ids))
		in, err := m.Tokens(ids[start : end-1])
		if err != nil {
			return 0, err
		}
		h := m.hidden(in, nil)
		// Project onto the vocabulary a block of positions at a time: a window of
		// 512 over 150k tokens would otherwise hold 300 MB of logits.
		const block = 128
		l := end - 1 - start
		for b0 := 0; b0 < l; b0 += block {
			b1 := min(b0+block, l)
			logits := m.head(mx.SliceAxis(h, 1, b0, b1))
			tgt32 := make([]int32, b1-b0)
			for i := range tgt32 {
				tgt32[i] = int32(ids[start+b0+i+1])
			}
			targets := mx.FromData(m.b, mx.Int32, tgt32, 1, b1-b0)
			loss := mx.Sum(mx.CrossEntropy(logits, targets), nil, false)
			v, err := loss.Item()
			if err != nil {
				return 0, fmt.Errorf("inference: perplexity: %w", err)
			}
			nll += float64(v)
			count += b1 - b0
		}
	}
	return math.Exp(nll / float64(count)), nil
}

// DecodePerplexity is Perplexity as decoding computes it: the first token is
// prefilled into s (which must be empty), then every later token appended one at
// a time, so each prediction reads the keys and values of the positions before it
// from s's cache as it stores them (a quantized KV cache's quality cost).
func DecodePerplexity(s *Session, ids []int) (float64, error) {
	if len(ids) < 2 {
		return 0, errors.New("inference: perplexity needs at least two tokens")
	}
	if len(s.tokens) > 0 {
		return 0, errors.New("inference: decode perplexity needs an empty session")
	}
	logits, _, err := s.Prefill(ids[:1])
	var nll float64
	for i := 1; ; i++ {
		if err != nil {
			return 0, err
		}
		row, err := logits.Float32s()
		if err != nil {
			return 0, fmt.Errorf("inference: perplexity: %w", err)
		}
		nll -= logProb(row, ids[i])
		if i == len(ids)-1 {
			break
		}
		logits, err = s.Append(ids[i : i+1])
	}
	return math.Exp(nll / float64(len(ids)-1)), nil
}
