package inference

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// withSlots runs f with every exact cache in the slotted layout, as on MLX.
func withSlots(t *testing.T, f func(t *testing.T)) {
	slotsAlways = true
	defer func() { slotsAlways = false }()
	f(t)
}

// The slotted layout decodes what the two-part one does: one token at a time
// past two growths of its buffers, after a trim into the middle and a
// multi-token prefill, and in chunked prefills; it reports what it holds.
func TestSlottedCacheMatchesTwoPart(t *testing.T) {
	b := cpu(t)
	for _, arch := range []string{"llama", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			m := NewRandom(tinyConfig(arch), 7, b)
			ids := tokenSeq(600, m.cfg.VocabSize, 3)
			want := stepLogits(t, NewSession(m), ids)
			var s *Session
			withSlots(t, func(t *testing.T) { s = NewSession(m) })
			if !s.cache.layers[0].slotted {
				t.Fatal("the session's cache is not slotted")
			}
			got := stepLogits(t, s, ids)
			for i := range got {
				if d := maxAbsDiff(got[i], want[i]); d > 1e-4*spreadOf(want[i]) {
					t.Fatalf("position %d: logits differ by %g", i, d)
				}
			}
			l := &s.cache.layers[0]
			if l.n != 600 || l.bk.Dim(2) != 768 || s.cache.Len() != 600 || s.cache.Bytes() <= 0 {
				t.Fatalf("holds %d positions in buffers of %d (Len %d, %d bytes), want 600 in 768", l.n, l.bk.Dim(2), s.cache.Len(), s.cache.Bytes())
			}
			// Trim into the middle, then a multi-token prefill: a fresh
			// session's logits.
			s.cache.Trim(300)
			s.tokens = s.tokens[:300]
			cont := append(append([]int{}, ids[:300]...), tokenSeq(40, m.cfg.VocabSize, 9)...)
			after, reused, err := s.Prefill(cont)
			if err != nil || reused != 300 {
				t.Fatalf("prefill after a trim: %v, reused %d", err, reused)
			}
			fresh, _, _ := NewSession(m).Prefill(cont)
			if d := maxAbsDiff(floats(t, after), floats(t, fresh)); d > 1e-4*spreadOf(floats(t, fresh)) {
				t.Errorf("after a trim and a prefill, logits differ from a fresh session's by %g", d)
			}
			s.Reset()
			if s.cache.Len() != 0 || s.cache.layers[0].bk != nil {
				t.Errorf("a reset cache holds %d positions", s.cache.Len())
			}
		})
	}
	// A quantized cache keeps its own layout.
	withSlots(t, func(t *testing.T) {
		s, err := NewSessionWith(NewRandom(tinyConfig("llama"), 7, b), CacheOptions{Bits: 8})
		if err != nil {
			t.Fatal(err)
		}
		if s.cache.layers[0].slotted {
			t.Error("an 8-bit cache took the slotted layout")
		}
	})
}

// The session and generation tests pass with the slotted layout (but the
// test of Bytes, which counts positions held: a slotted cache holds, and
// reports, its buffers' whole capacity).
func TestSlottedCacheSessions(t *testing.T) {
	runWith(t, withSlots, map[string]func(*testing.T){
		"incremental decode": TestIncrementalDecodeMatchesFullForward,
		"trim then continue": TestTrimThenContinue,
		"prefix reuse":       TestSessionPrefixReuse,
		"every divergence":   TestSessionPrefixReuseAtEveryDivergence,
		"chunked prefill":    TestChunkedPrefill,
		"generate stops":     TestGenerateStops,
		"generate queued":    TestGenerateQueuedMatchesPlain,
		"adapters change":    TestGenerateWhileAdaptersChange,
	})
}

// On MLX (where libmlxc loads) a session's cache is slotted, and decoding
// with it, its old buffers freed step by step, gives the cpu backend's logits.
func TestSlottedCacheOnMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	for _, arch := range []string{"llama", "qwen3"} {
		cfg := tinyConfig(arch)
		ids := tokenSeq(300, cfg.VocabSize, 5)
		want := stepLogits(t, NewSession(NewRandom(cfg, 7, cpu(t))), ids)
		s := NewSession(NewRandom(cfg, 7, be))
		if !s.cache.layers[0].slotted {
			t.Fatal("a cache on MLX is not slotted")
		}
		got := stepLogits(t, s, ids)
		for i := range got {
			if d := maxAbsDiff(got[i], want[i]); d > 1e-3*spreadOf(want[i]) {
				t.Fatalf("%s position %d: MLX logits differ from cpu's by %g", arch, i, d)
			}
		}
		s.cache.Trim(100)
		s.tokens = s.tokens[:100]
		if _, err := s.Append(ids[100:110]); err != nil {
			t.Fatalf("%s: appending after a trim: %v", arch, err)
		}
	}
}
