package inference

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// A session seeded from another's kept hidden states holds what a prefill
// would have given it: its logits after more tokens, and after decoding on,
// are a fresh session's, on the two-part and the slotted layout; the source
// goes on decoding unharmed (on MLX too, where a replaced buffer is freed
// unless another cache shares it). Seeding is refused where the models differ
// below the block, or the source kept nothing.
func TestSeedFromMatchesPrefill(t *testing.T) {
	cases := []struct {
		name  string
		b     mx.Backend
		slots bool
	}{{"two-part", cpu(t), false}, {"slotted", cpu(t), true}}
	if be, err := mx.Open("mlx"); err == nil { // slotted, its replaced buffers freed
		cases = append(cases, struct {
			name  string
			b     mx.Backend
			slots bool
		}{"mlx", be, false})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			slotsAlways = c.slots
			defer func() { slotsAlways = false }()
			b := c.b
			cfg := tinyConfig("qwen3")
			m := NewRandom(cfg, 11, b)
			if _, err := m.PushAdapter(onBackend(t, randomAdapter(t, m, "user", 3, 1), b)); err != nil {
				t.Fatal(err)
			}
			const k = 1 // the tiny model's last block: its adapter is the fork's own
			ids := tokenSeq(300, cfg.VocabSize, 7)
			src := seedSource(t, m, k, ids[:250], ids[250:260]) // decoded positions are kept too
			fork := upperFork(t, m, k)
			s := NewSession(fork)
			n, err := s.SeedFrom(src, k)
			if err != nil || n != 260 || s.Cache().Len() != 260 {
				t.Fatalf("seeded %d positions (cache %d): %v", n, s.Cache().Len(), err)
			}
			got, reused, err := s.Prefill(ids[:280])
			if err != nil || reused != 260 {
				t.Fatalf("prefill after seeding: reused %d, %v", reused, err)
			}
			want, _, _ := NewSession(fork).Prefill(ids[:280])
			if d := maxAbsDiff(floats(t, got), floats(t, want)); d > 1e-4*spreadOf(floats(t, want)) {
				t.Errorf("seeded session's logits differ from a fresh prefill's by %g", d)
			}
			// Both go on decoding; the source still matches its own fresh prefill.
			for i := 280; i < 290; i++ {
				if _, err := s.Append(ids[i : i+1]); err != nil {
					t.Fatal(err)
				}
			}
			srcNext, err := src.Append(ids[260:261])
			if err != nil {
				t.Fatal(err)
			}
			srcWant, _, _ := NewSession(m).Prefill(ids[:261])
			if d := maxAbsDiff(floats(t, srcNext), floats(t, srcWant)); d > 1e-4*spreadOf(floats(t, srcWant)) {
				t.Errorf("after seeding another session, the source's logits are off by %g", d)
			}

			// Refusals.
			other := NewRandom(cfg, 12, b)
			if _, err := NewSession(other).SeedFrom(src, k); err == nil || !strings.Contains(err.Error(), "differ below") {
				t.Errorf("seeding across different weights: %v", err)
			}
			if _, err := NewSession(fork).SeedFrom(NewSession(m), k); err == nil {
				t.Error("seeding from a source that kept nothing gave no error")
			}
			if _, err := s.SeedFrom(src, k); err == nil {
				t.Error("seeding a session that holds tokens gave no error")
			}
		})
	}
}

// upperAdapter is a random adapter on every linear layer of blocks k and up,
// keys and values included, so the cache of those blocks depends on it.
func upperAdapter(t *testing.T, m *Model, k int) *Adapter {
	const rank = 2
	loras := map[string]LoRA{}
	seed := uint64(40)
	m.Linears(func(path string, l *Linear) {
		var i int
		if _, err := fmt.Sscanf(path, "model.layers.%d.", &i); err != nil || i < k {
			return
		}
		loras[path] = LoRA{
			A:     mx.MulScalar(mx.RandomNormal(seed, l.In, rank), 0.3),
			B:     mx.MulScalar(mx.RandomNormal(seed+1, rank, l.Out), 0.3),
			Scale: 1,
		}
		seed += 2
	})
	if len(loras) == 0 {
		t.Fatal("no layer at or above the block to adapt")
	}
	return NewAdapter("ttt", loras)
}

// onBackend is a with its arrays copied onto b (random arrays are drawn on
// the default backend).
func onBackend(t *testing.T, a *Adapter, b mx.Backend) *Adapter {
	move := func(x *mx.Array) *mx.Array {
		v, err := x.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return mx.FromData(b, mx.Float32, v, x.Shape()...)
	}
	loras := map[string]LoRA{}
	for path, lo := range a.loras {
		loras[path] = LoRA{A: move(lo.A), B: move(lo.B), Scale: lo.Scale}
	}
	return NewAdapter(a.name, loras)
}

// cancelAfter is a context whose Err reports cancellation from its n-th call on:
// a cancel that lands between two chunks of a prefill.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// A cancel during a long prefill or seeding takes effect at the next chunk:
// the prefill keeps the chunks it finished, which the next prefill reuses;
// the seeded session is left empty and the source untouched; Generate reports
// the turn cancelled.
func TestPrefillAndSeedCancel(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 11, b)
	ids := tokenSeq(2*prefillChunk+40, cfg.VocabSize, 7)
	s := NewSession(m)
	if _, _, err := s.PrefillContext(&cancelAfter{context.Background(), 1}, ids); !errors.Is(err, context.Canceled) || s.Cache().Len() != prefillChunk {
		t.Fatalf("cancelled after one chunk: %v, %d positions held", err, s.Cache().Len())
	}
	got, reused, err := s.Prefill(ids)
	if err != nil || reused != prefillChunk {
		t.Fatalf("prefill after a cancel: reused %d, %v", reused, err)
	}
	want, _, _ := NewSession(m).Prefill(ids)
	if d := maxAbsDiff(floats(t, got), floats(t, want)); d > 1e-4*spreadOf(floats(t, want)) {
		t.Errorf("logits after a cancelled prefill differ from a fresh one's by %g", d)
	}

	const k = 1
	src := seedSource(t, m, k, ids, nil)
	seeded := NewSession(upperFork(t, m, k))
	if n, err := seeded.SeedFromContext(&cancelAfter{context.Background(), 2}, src, k); !errors.Is(err, context.Canceled) || n != 0 || seeded.Cache().Len() != 0 || len(seeded.Tokens()) != 0 {
		t.Fatalf("cancelled seeding: %d seeded, %d held, %v", n, seeded.Cache().Len(), err)
	}
	if n, err := seeded.SeedFrom(src, k); err != nil || n != len(ids) {
		t.Fatalf("seeding after a cancel: %d, %v", n, err)
	}

	st, err := Generate(&cancelAfter{context.Background(), 2}, NewSession(m), ids, GenerateOptions{MaxTokens: 4}, func(int) bool { return false })
	if !errors.Is(err, context.Canceled) || st.StopReason != StopCancelled || st.GeneratedTokens != 0 {
		t.Errorf("generate cancelled in its prefill: %v, stop %q, %d tokens", err, st.StopReason, st.GeneratedTokens)
	}
}

// A seeded session and its source share their lower layers' tails: each then
// decodes one token at a time, interleaved with the other, and still matches a
// fresh session of its own model.
func TestSeededTailsStayApart(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 11, b)
	const k = 1
	ids := tokenSeq(120, cfg.VocabSize, 5)
	src := seedSource(t, m, k, ids[:100], ids[100:105]) // a tail of single positions, with room to grow in place
	fork := upperFork(t, m, k)
	s := NewSession(fork)
	if _, err := s.SeedFrom(src, k); err != nil {
		t.Fatal(err)
	}
	mine, theirs := []int{3, 1, 4, 1, 5}, []int{2, 7, 1, 8, 2}
	var got, gotSrc *mx.Array
	for i := range mine {
		var err error
		if got, err = s.Append(mine[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if gotSrc, err = src.Append(theirs[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	want, _, _ := NewSession(fork).Prefill(append(slices.Clone(ids[:105]), mine...))
	wantSrc, _, _ := NewSession(m).Prefill(append(slices.Clone(ids[:105]), theirs...))
	if d := maxAbsDiff(floats(t, got), floats(t, want)); d > 1e-4*spreadOf(floats(t, want)) {
		t.Errorf("seeded session's logits differ from a fresh prefill's by %g", d)
	}
	if d := maxAbsDiff(floats(t, gotSrc), floats(t, wantSrc)); d > 1e-4*spreadOf(floats(t, wantSrc)) {
		t.Errorf("source's logits differ from a fresh prefill's by %g", d)
	}
}

// seedSource is a session of m that keeps the hidden states entering block k,
// holding prompt prefilled and then decoded, one token at a time.
func seedSource(t *testing.T, m *Model, k int, prompt, decoded []int) *Session {
	t.Helper()
	src := NewSession(m)
	if err := src.Cache().KeepHidden(k); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Prefill(prompt); err != nil {
		t.Fatal(err)
	}
	for i := range decoded {
		if _, err := src.Append(decoded[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// upperFork is a fork of m with an adapter of its own on blocks k and up.
func upperFork(t *testing.T, m *Model, k int) *Model {
	t.Helper()
	fork := m.Fork()
	if _, err := fork.PushAdapter(onBackend(t, upperAdapter(t, fork, k), m.b)); err != nil {
		t.Fatal(err)
	}
	return fork
}
