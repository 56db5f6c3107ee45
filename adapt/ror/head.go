package ror

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/decide"
)

// This file is decide's head, written a second time: decide keeps its scoring
// and loss unexported, and RoR must (a) take gradient steps through them and
// (b) score candidate weights off to the side, on cached features, without
// installing them. The formula is decide's (training/decide/task.go):
//
//	s_k = h_q·r_k + h_{m_k}·v + mean(h_state)·u_k + b_k
//
// Should decide's head change, New's check (checkHead) finds the scores no
// longer match Model.Decide's and refuses to start, rather than letting RoR
// train a function other than the one that answers. The copy goes when decide
// exports its loss.

// Head weight names, as decide names them: "head.<question>.<part>".
func headName(question, part string) string { return "head." + question + "." + part }

// isFixed reports the head weights decide's training leaves alone (the pooled
// state's standardization).
func isFixed(name string) bool {
	return strings.HasSuffix(name, ".pool_mean") || strings.HasSuffix(name, ".pool_scale")
}

// features are what the head reads from the backbone for one question of one
// state, the final hidden states (after the norm):
type features struct {
	query   []float32 // (hidden)     h_q
	markers []float32 // (K, hidden)  h_{m_k}
	pooled  []float32 // (hidden)     mean(h_state)
}

// forward runs m once over seqs, all of one question with k options, and
// returns the head's inputs: hq (n, hidden), hm (n·K, hidden), pooled (n,
// hidden). They are traced when m's adapter is.
func forward(m *inference.Model, seqs []decide.Sequence, k, pad int) (hq, hm, pooled *mx.Array) {
	b := m.Backend()
	n, l := len(seqs), 0
	for _, s := range seqs {
		l = max(l, len(s.Tokens))
	}
	ids := make([]int32, n*l) // (n, L), right-padded: a causal model's positions before the padding do not see it
	query := make([]int32, n)
	markers := make([]int32, 0, n*k)
	pool := make([]float32, n*n*l) // (n, n·L): row i averages sequence i's state tokens
	for i, s := range seqs {
		row := ids[i*l : (i+1)*l]
		for j := range row {
			row[j] = int32(pad)
		}
		for j, t := range s.Tokens {
			row[j] = int32(t)
		}
		query[i] = int32(i*l + s.Query)
		for _, mk := range s.Markers {
			markers = append(markers, int32(i*l+mk))
		}
		if s.State[1] > s.State[0] {
			v := 1 / float32(s.State[1]-s.State[0])
			w := pool[i*n*l : (i+1)*n*l]
			for p := i*l + s.State[0]; p < i*l+s.State[1]; p++ {
				w[p] = v
			}
		}
	}
	h := m.Hidden(mx.FromData(b, mx.Int32, ids, n, l), nil) // (n, L, hidden)
	if h.Err() != nil {
		return h, h, h
	}
	hidden := h.Dim(2)
	flat := mx.Reshape(h, n*l, hidden)                                 // (n·L, hidden)
	hq = mx.Take(flat, mx.FromData(b, mx.Int32, query, n), 0)          // (n, hidden)
	hm = mx.Take(flat, mx.FromData(b, mx.Int32, markers, n*k), 0)      // (n·K, hidden)
	pooled = mx.Matmul(mx.FromData(b, mx.Float32, pool, n, n*l), flat) // (n, hidden)
	return hq, hm, pooled
}

// scores is the head over stacked features of n sequences of question q with
// k options: (n, K).
func scores(head map[string]*mx.Array, q string, hq, hm, pooled *mx.Array, n, k int) *mx.Array {
	hidden := hq.Dim(1)
	s := mx.MatmulT(hq, head[headName(q, "rows")], false, true)                                        // (n, K)
	s = mx.Add(s, mx.Reshape(mx.Matmul(hm, mx.Reshape(head[headName(q, "marker")], hidden, 1)), n, k)) // (n, K)
	if u := head[headName(q, "pool")]; u != nil {
		if mean, scale := head[headName(q, "pool_mean")], head[headName(q, "pool_scale")]; mean != nil && scale != nil {
			pooled = mx.Div(mx.Sub(pooled, mean), scale)
		}
		s = mx.Add(s, mx.MatmulT(pooled, u, false, true)) // (n, K)
	}
	return mx.Add(s, head[headName(q, "bias")])
}

// stack lays cached features of items (one question) out as the head's
// inputs.
func stack(b mx.Backend, items []*item, k, hidden int) (hq, hm, pooled *mx.Array) {
	n := len(items)
	q, m, p := make([]float32, 0, n*hidden), make([]float32, 0, n*k*hidden), make([]float32, 0, n*hidden)
	for _, it := range items {
		q, m, p = append(q, it.feat.query...), append(m, it.feat.markers...), append(p, it.feat.pooled...)
	}
	return mx.FromData(b, mx.Float32, q, n, hidden), mx.FromData(b, mx.Float32, m, n*k, hidden), mx.FromData(b, mx.Float32, p, n, hidden)
}

// extract computes the features of the items that lack them (or hold ones made
// under another adapter, gen), batching up to batchTokens tokens per forward
// pass, longest first so similar lengths share a pass.
func extract(ctx context.Context, m *inference.Model, t *decide.Task, items []*item, gen uint64, pad, batchTokens int) error {
	var todo []*item
	for _, it := range items {
		if it.feat == nil || it.gen != gen {
			todo = append(todo, it)
		}
	}
	slices.SortStableFunc(todo, func(a, b *item) int {
		if a.question != b.question {
			return a.question - b.question
		}
		return len(b.seq.Tokens) - len(a.seq.Tokens)
	})
	for start := 0; start < len(todo); {
		if err := ctx.Err(); err != nil {
			return err
		}
		q, l := todo[start].question, len(todo[start].seq.Tokens)
		end := start + 1
		for end < len(todo) && end-start < max(1, batchTokens/max(l, 1)) && todo[end].question == q {
			end++
		}
		batch := todo[start:end]
		seqs := make([]decide.Sequence, len(batch))
		for i, it := range batch {
			seqs[i] = it.seq
		}
		k := len(t.Questions[q].Options)
		hq, hm, pooled := forward(m, seqs, k, pad)
		if err := mx.Eval(hq, hm, pooled); err != nil {
			return fmt.Errorf("ror: features: %w", err)
		}
		vq, err := hq.Float32s()
		if err != nil {
			return err
		}
		vm, err := hm.Float32s()
		if err != nil {
			return err
		}
		vp, err := pooled.Float32s()
		if err != nil {
			return err
		}
		hidden := hq.Dim(1)
		for i, it := range batch {
			it.feat = &features{
				query:   slices.Clone(vq[i*hidden : (i+1)*hidden]),
				markers: slices.Clone(vm[i*k*hidden : (i+1)*k*hidden]),
				pooled:  slices.Clone(vp[i*hidden : (i+1)*hidden]),
			}
			it.gen = gen
		}
		start = end
	}
	return nil
}

// byQuestion groups items by question, in question order.
func byQuestion(items []*item) [][]*item {
	var groups [][]*item
	idx := map[int]int{}
	for _, it := range items {
		g, ok := idx[it.question]
		if !ok {
			g = len(groups)
			idx[it.question] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], it)
	}
	slices.SortFunc(groups, func(a, b []*item) int { return a[0].question - b[0].question })
	return groups
}

// scoreCached returns each item's raw scores under head, from cached features.
func scoreCached(b mx.Backend, t *decide.Task, head map[string]*mx.Array, items []*item, hidden int) ([][]float64, error) {
	out := make(map[*item][]float64, len(items))
	for _, g := range byQuestion(items) {
		q := t.Questions[g[0].question]
		k := len(q.Options)
		hq, hm, pooled := stack(b, g, k, hidden)
		s, err := scores(head, q.Name, hq, hm, pooled, len(g), k).Float32s()
		if err != nil {
			return nil, fmt.Errorf("ror: scores: %w", err)
		}
		for i, it := range g {
			row := make([]float64, k)
			for c := range row {
				row[c] = float64(s[i*k+c])
			}
			out[it] = row
		}
	}
	res := make([][]float64, len(items))
	for i, it := range items {
		res[i] = out[it]
	}
	return res, nil
}

// loss is Σ weight·cross-entropy over items, each group's features coming from
// the cache (fresh == nil) or from a forward pass of fresh (training the
// adapter, whose weights are traced).
func loss(fresh *inference.Model, b mx.Backend, t *decide.Task, head map[string]*mx.Array, items []*item, weights map[*item]float32, hidden, pad int) *mx.Array {
	var total *mx.Array
	for _, g := range byQuestion(items) {
		q := t.Questions[g[0].question]
		k := len(q.Options)
		var hq, hm, pooled *mx.Array
		if fresh != nil {
			seqs := make([]decide.Sequence, len(g))
			for i, it := range g {
				seqs[i] = it.seq
			}
			hq, hm, pooled = forward(fresh, seqs, k, pad)
			if err := hq.Err(); err != nil {
				return hq
			}
		} else {
			hq, hm, pooled = stack(b, g, k, hidden)
		}
		labels, w := make([]int32, len(g)), make([]float32, len(g))
		for i, it := range g {
			labels[i], w[i] = int32(it.label), weights[it]
		}
		ce := mx.CrossEntropy(scores(head, q.Name, hq, hm, pooled, len(g), k), mx.FromData(b, mx.Int32, labels, len(g))) // (n)
		term := mx.Sum(mx.Mul(ce, mx.FromData(b, mx.Float32, w, len(g))), nil, false)
		if total == nil {
			total = term
		} else {
			total = mx.Add(total, term)
		}
	}
	if total == nil {
		return mx.Errorf("ror: a step with nothing to learn from")
	}
	return total
}
