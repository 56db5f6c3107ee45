package ttt

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

// TestIndexNearest: among the document's paragraphs and unrelated ones, the
// chunks nearest to the held-out continuation are the document's, and every
// chunk is its own nearest neighbour.
func TestIndexNearest(t *testing.T) {
	m, tok := demoModel(t)
	enc := func(s string) []int { return encode(t, tok, s) }
	doc := paragraphs(t, enc, "document.txt")
	chunks := slices.Concat(paragraphs(t, enc, "distractors.txt"), doc) // the document's ids: 4, 5, 6
	ctx := context.Background()
	ix, err := BuildIndex(ctx, m, chunks)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != len(chunks) || ix.Version() != m.AdapterVersion() {
		t.Fatalf("index of %d chunks at version %d, want %d at %d", ix.Len(), ix.Version(), len(chunks), m.AdapterVersion())
	}
	for i, c := range chunks {
		v, err := Embed(ctx, m, c)
		if err != nil {
			t.Fatal(err)
		}
		var norm float64
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Errorf("chunk %d: vector of squared norm %v, want 1", i, norm)
		}
		if got := ix.NearestTo(v, 1); !slices.Equal(got, []int{i}) {
			t.Errorf("chunk %d: nearest is %v, want itself", i, got)
		}
	}
	query := enc(readTestdata(t, "continuation.txt"))
	got, err := ix.Nearest(ctx, m, query, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(got)), []int{4, 5, 6}) {
		t.Errorf("nearest 3 to the continuation: %v, want the document's paragraphs 4, 5, 6", got)
	}
	if c := ix.Chunks(got[0]); len(c) != 1 || !slices.Equal(c[0], chunks[got[0]]) {
		t.Errorf("Chunks(%d) is not the chunk indexed", got[0])
	}
	if n := len(ix.NearestTo(make([]float32, m.Config().HiddenSize), 100)); n != len(chunks) {
		t.Errorf("k past the index: %d ids, want %d", n, len(chunks))
	}
	t.Logf("nearest to the continuation: %v", got)
}

// TestIndexLongChunk: a chunk longer than one forward window is embedded in
// windows, and a cancelled context stops the embedding.
func TestIndexLongChunk(t *testing.T) {
	m, tok := demoModel(t)
	doc := paragraphs(t, func(s string) []int { return encode(t, tok, s) }, "document.txt")
	long := slices.Concat(doc[0], doc[1], doc[2], doc[0], doc[1], doc[2]) // > embedWindow tokens
	if len(long) <= embedWindow {
		t.Fatalf("%d tokens: not past one window of %d", len(long), embedWindow)
	}
	if _, err := Embed(context.Background(), m, long); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := BuildIndex(ctx, m, [][]int{long}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if _, err := Embed(context.Background(), m, nil); err == nil {
		t.Error("embedding no tokens: want an error")
	}
}

// TestRetrieveThenAdapt is the loop the chat runs: index the user's
// documents, retrieve the chunks nearest to the prompt, train on them nearest
// first, and the held-out continuation's loss falls.
func TestRetrieveThenAdapt(t *testing.T) {
	m, tok := demoModel(t)
	enc := func(s string) []int { return encode(t, tok, s) }
	chunks := slices.Concat(paragraphs(t, enc, "distractors.txt"), paragraphs(t, enc, "document.txt"))
	ctx := context.Background()
	ix, err := BuildIndex(ctx, m, chunks)
	if err != nil {
		t.Fatal(err)
	}
	held := enc(readTestdata(t, "continuation.txt"))
	prompt := held[:24]
	ids, err := ix.Nearest(ctx, m, prompt, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, res, err := Adapt(ctx, m, ix.Chunks(ids...), Options{Steps: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Done()
	before, after := nll(t, m, held[24:]), nll(t, a.Model(), held[24:])
	t.Logf("retrieved %v; held-out loss %.3f -> %.3f in %d steps (%.0f ms)", ids, before, after, len(res.Steps), res.TotalMS)
	if !(before-after > 0.3) {
		t.Errorf("held-out loss %.3f -> %.3f after training on retrieved chunks %v, want a drop of at least 0.3", before, after, ids)
	}
}
