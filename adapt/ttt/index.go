package ttt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// embedWindow bounds the tokens of one forward pass while embedding, so a long
// chunk costs memory of a short one.
const embedWindow = 512

// Index holds the user's document chunks with a vector for each: the model's
// own final hidden states (normalized), averaged over the chunk's tokens and
// scaled to unit length, so the dot product of two vectors is their cosine.
// Hardt & Sun retrieve TTT's neighbours this way with the model being adapted,
// which needs no second, embedding model; it is coarse (a model trained for
// next tokens, not for retrieval) but it ranks by what the model itself sees.
//
// The vectors depend on the adapters they were computed with: Version is m's
// adapter version at BuildIndex; an index built under one version still ranks
// usefully under a nearby one. An Index is not safe for concurrent Add; reading
// it concurrently is.
type Index struct {
	dim     int
	vecs    [][]float32 // (chunks, dim), unit length
	chunks  [][]int
	version uint64
}

// BuildIndex embeds every chunk with m (see Embed).
func BuildIndex(ctx context.Context, m *inference.Model, chunks [][]int) (*Index, error) {
	ix := &Index{dim: m.Config().HiddenSize, version: m.AdapterVersion()}
	for _, c := range chunks {
		if _, err := ix.Add(ctx, m, c); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// Add embeds chunk with m and adds it; it returns the chunk's id.
func (ix *Index) Add(ctx context.Context, m *inference.Model, chunk []int) (int, error) {
	v, err := Embed(ctx, m, chunk)
	if err != nil {
		return -1, fmt.Errorf("ttt: index chunk %d: %w", len(ix.chunks), err)
	}
	if len(v) != ix.dim {
		return -1, fmt.Errorf("ttt: index: a vector of %d where the index holds %d (another model?)", len(v), ix.dim)
	}
	ix.vecs = append(ix.vecs, v)
	ix.chunks = append(ix.chunks, slices.Clone(chunk))
	return len(ix.chunks) - 1, nil
}

// Len is the number of chunks.
func (ix *Index) Len() int { return len(ix.chunks) }

// Version is the adapter version of the model the index was built with.
func (ix *Index) Version() uint64 { return ix.version }

// Chunks returns the tokens of the chunks with the given ids, in that order:
// Nearest's answer turned into Adapt's input.
func (ix *Index) Chunks(ids ...int) [][]int {
	out := make([][]int, len(ids))
	for i, id := range ids {
		out[i] = ix.chunks[id]
	}
	return out
}

// Nearest embeds query with m and returns the ids of the k chunks most similar
// to it, nearest first (ties by id).
func (ix *Index) Nearest(ctx context.Context, m *inference.Model, query []int, k int) ([]int, error) {
	v, err := Embed(ctx, m, query)
	if err != nil {
		return nil, fmt.Errorf("ttt: query: %w", err)
	}
	return ix.NearestTo(v, k), nil
}

// NearestTo returns the ids of the k chunks whose vectors have the largest dot
// product with v, nearest first (ties by id).
func (ix *Index) NearestTo(v []float32, k int) []int {
	if len(v) != ix.dim {
		panic(fmt.Sprintf("ttt: a query vector of %d for an index of %d", len(v), ix.dim))
	}
	type scored struct {
		id  int
		sim float64
	}
	all := make([]scored, len(ix.vecs))
	for i, u := range ix.vecs {
		var s float64
		for j := range u {
			s += float64(u[j]) * float64(v[j])
		}
		all[i] = scored{i, s}
	}
	slices.SortStableFunc(all, func(a, b scored) int { return cmp.Compare(b.sim, a.sim) })
	k = max(min(k, len(all)), 0)
	ids := make([]int, k)
	for i := range ids {
		ids[i] = all[i].id
	}
	return ids
}

// Embed is the mean over tokens of m's normalized final hidden states, scaled
// to unit length (hidden,). A sequence longer than one window is embedded in
// consecutive windows that share no context, and all their tokens averaged. It
// holds m's adapter read lock, so it may run while m serves a chat.
func Embed(ctx context.Context, m *inference.Model, tokens []int) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("ttt: embed: no tokens")
	}
	window := embedWindow
	if c := m.ContextLength(); c > 0 {
		window = min(window, c)
	}
	sum := make([]float64, m.Config().HiddenSize)
	for start := 0; start < len(tokens); start += window {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ttt: embed: %w", err)
		}
		w := tokens[start:min(start+window, len(tokens))]
		ids, err := m.Tokens(w)
		if err != nil {
			return nil, fmt.Errorf("ttt: embed: %w", err)
		}
		var row []float32
		err = m.WithAdapterReadLock(func(uint64) error {
			h := mx.Sum(m.Hidden(ids, nil), []int{0, 1}, false) // (hidden)
			row, err = mx.AsType(h, mx.Float32).Float32s()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("ttt: embed: %w", err)
		}
		for j, x := range row {
			sum[j] += float64(x)
		}
	}
	var norm float64
	for _, x := range sum {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	if !(norm > 0) || math.IsInf(norm, 0) {
		return nil, fmt.Errorf("ttt: embed: the pooled hidden state has norm %g", norm)
	}
	out := make([]float32, len(sum))
	for j, x := range sum {
		out[j] = float32(x / norm) // the mean's 1/n cancels in the normalization
	}
	return out, nil
}
