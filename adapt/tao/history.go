package tao

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/inloop/inloop/adapt/ttt"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
)

// DefaultNeighbours is how many rated answers History consults per answer.
const DefaultNeighbours = 5

// History is the feedback-history reward: an answer scores what people said
// about the rated answers most like it. Every rated answer is a vector — the
// model's own mean final hidden state, unit length (ttt.Embed, the vectors
// test-time training retrieves by) — labelled 1 (a thumb up, or a person's
// correction) or 0 (a thumb down). An answer's score is the similarity-weighted
// vote of its k nearest rated answers,
//
//	r = Σⱼ max(cosⱼ, 0)·yⱼ / Σⱼ max(cosⱼ, 0),
//
// and 0.5 when none of them is similar at all (or the answer is empty). It
// is coarse — a next-token model's states, not a trained embedding — and it
// only knows the kind of answers people have rated; the judge generalizes,
// this remembers.
type History struct {
	m      *inference.Model
	tok    *tokenizer.Tokenizer
	k      int
	vecs   [][]float32
	labels []float64
}

// NewHistory embeds the rated answers with m (see History). m is only read;
// pass the bare model or the user's, not one being trained. k ≤ 0 takes
// DefaultNeighbours.
func NewHistory(ctx context.Context, m *inference.Model, tok *tokenizer.Tokenizer, rated []Rated, k int) (*History, error) {
	if k <= 0 {
		k = DefaultNeighbours
	}
	h := &History{m: m, tok: tok, k: k}
	add := func(text string, y float64) error {
		v, err := h.embed(ctx, text)
		if err != nil || v == nil {
			return err
		}
		h.vecs, h.labels = append(h.vecs, v), append(h.labels, y)
		return nil
	}
	for _, r := range rated {
		switch {
		case r.Thumb > 0:
			if err := add(r.Answer, 1); err != nil {
				return nil, err
			}
		case r.Thumb < 0:
			if err := add(r.Answer, 0); err != nil {
				return nil, err
			}
			if r.Correction != "" {
				if err := add(r.Correction, 1); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(h.vecs) == 0 {
		return nil, fmt.Errorf("%w: the history holds no rated answer", ErrTooFewRatings)
	}
	return h, nil
}

// Len is how many rated answers the history holds.
func (h *History) Len() int { return len(h.vecs) }

// Name is "history".
func (h *History) Name() string { return "history" }

// embed is text's vector, nil for text with no tokens.
func (h *History) embed(ctx context.Context, text string) ([]float32, error) {
	ids, err := h.tok.Encode(text, false)
	if err != nil {
		return nil, fmt.Errorf("tao: history: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	v, err := ttt.Embed(ctx, h.m, ids)
	if err != nil {
		return nil, fmt.Errorf("tao: history: %w", err)
	}
	return v, nil
}

// Score is each answer's nearest-neighbour vote.
func (h *History) Score(ctx context.Context, items []Item) ([]float64, error) {
	out := make([]float64, len(items))
	type near struct {
		sim float64
		i   int
	}
	for n, it := range items {
		v, err := h.embed(ctx, it.Answer)
		if err != nil {
			return nil, err
		}
		if v == nil {
			out[n] = 0.5
			continue
		}
		ns := make([]near, len(h.vecs))
		for i, u := range h.vecs {
			var dot float64
			for d := range u {
				dot += float64(u[d]) * float64(v[d])
			}
			ns[i] = near{dot, i}
		}
		slices.SortFunc(ns, func(a, b near) int { return cmp.Or(cmp.Compare(b.sim, a.sim), cmp.Compare(a.i, b.i)) })
		var num, den float64
		for _, x := range ns[:min(h.k, len(ns))] {
			w := max(x.sim, 0)
			num += w * h.labels[x.i]
			den += w
		}
		out[n] = 0.5
		if den > 0 {
			out[n] = num / den
		}
	}
	return out, nil
}
