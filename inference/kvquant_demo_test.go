package inference_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
)

// heldOut is text the demo model was not trained on, tokenized: the test-time
// training fixtures (about 700 tokens), cut to the model's 512 positions.
func heldOut(t testing.TB) (*inference.Model, []int) {
	m, tok := inferencetest.Load(t, inferencetest.Demo(t))
	var text []string
	for _, f := range []string{"document.txt", "continuation.txt", "distractors.txt"} {
		raw, err := os.ReadFile("../adapt/ttt/testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, strings.TrimSpace(string(raw)))
	}
	ids, err := tok.Encode(strings.Join(text, "\n\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	return m, ids[:min(len(ids), m.ContextLength())]
}

// sampled is 511 tokens the demo model writes after token 1 (temperature 0.8,
// seed 1): text of its own kind, where what it attends to matters (its
// perplexity is far below the fixtures').
func sampled(t testing.TB, m *inference.Model) []int {
	prompt := []int{1}
	s := inference.NewSession(m)
	ids := append([]int{}, prompt...)
	_, err := inference.Generate(context.Background(), s, prompt, inference.GenerateOptions{MaxTokens: m.ContextLength() - len(prompt),
		Sampling: inference.SampleOptions{Temperature: 0.8, Seed: 1}}, func(tok int) bool { ids = append(ids, tok); return false })
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func decodePerplexity(t testing.TB, m *inference.Model, ids []int, o inference.CacheOptions) float64 {
	s, err := inference.NewSessionWith(m, o)
	if err != nil {
		t.Fatal(err)
	}
	ppl, err := inference.DecodePerplexity(s, ids)
	if err != nil {
		t.Fatal(err)
	}
	return ppl
}

// The quality a quantized KV cache costs the demo model, decoding held-out text
// token by token: a bfloat16 cache within 0.2% of the exact cache's perplexity,
// 8 bits within 1%, 4 bits within 10%. (The demo's 48-wide heads are padded to a group of 64.)
func TestQuantizedCachePerplexity(t *testing.T) {
	m, fixtures := heldOut(t)
	for name, ids := range map[string][]int{"fixtures": fixtures, "sampled": sampled(t, m)} {
		exact := decodePerplexity(t, m, ids, inference.CacheOptions{})
		for _, c := range []struct {
			bits  int
			worst float64
		}{{16, 0.002}, {8, 0.01}, {4, 0.10}} {
			ppl := decodePerplexity(t, m, ids, inference.CacheOptions{Bits: c.bits})
			t.Logf("%s, %d tokens: perplexity %.4f exact, %.4f with a %d-bit cache (%+.2f%%)", name, len(ids), exact, ppl, c.bits, 100*(ppl/exact-1))
			if d := ppl/exact - 1; d > c.worst || d < -c.worst {
				t.Errorf("%s, %d-bit cache: perplexity %.4f against %.4f exact, off by more than %g%%", name, c.bits, ppl, exact, 100*c.worst)
			}
		}
	}
}

// BenchmarkKVCachePerplexity is the table's quality column: the demo model's
// perplexity on held-out text decoded through each cache.
func BenchmarkKVCachePerplexity(b *testing.B) {
	m, fixtures := heldOut(b)
	for _, text := range []struct {
		name string
		ids  []int
	}{{"fixtures", fixtures}, {"sampled", sampled(b, m)}} {
		ids := text.ids
		exact := decodePerplexity(b, m, ids, inference.CacheOptions{})
		for _, bits := range []int{0, 16, 8, 6, 4, 3} {
			b.Run(fmt.Sprintf("%s/kv%d", text.name, bits), func(b *testing.B) {
				var ppl float64
				for range b.N {
					ppl = decodePerplexity(b, m, ids, inference.CacheOptions{Bits: bits})
				}
				b.ReportMetric(ppl, "ppl")
				b.ReportMetric(100*(ppl/exact-1), "delta-%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
