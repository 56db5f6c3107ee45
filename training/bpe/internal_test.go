package bpe

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// TestScannerMatchesRegex holds splitGPT2 equal to GPT2Pattern as regexp2
// runs it.
func TestScannerMatchesRegex(t *testing.T) {
	re := regexp2.MustCompile(GPT2Pattern, regexp2.None)
	pieces := []string{"a", "Bc", " ", "  ", "\n", "\r\n", "\t", "\v", "\f", "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
		"'S", "'r", "'l", "1", "42", "٣", "½", ",", ".!", "-", "é", "日本", "😀", "\u0301", "\u00a0", "\u2028", "\u3000",
		"\u0085", "\x00", "\x7f", "_", "ǅ", "ⅷ"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		var want []string
		runes := []rune(s)
		m, err := re.FindRunesMatch(runes)
		for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
			want = append(want, string(runes[m.Index:m.Index+m.Length]))
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		splitGPT2(s, func(w string) { got = append(got, w) })
		if !slices.Equal(got, want) {
			t.Fatalf("split of %q: %q, regex %q", s, got, want)
		}
	}
}

func TestSplitSpecial(t *testing.T) {
	var got []string
	splitSpecial("a<|x|>b<|x|><|xy|>c<|x", []string{"<|x|>", "<|xy|>", "<|x"}, func(s string) { got = append(got, s) })
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestIncrementalCounts checks the pair counts kept up to date through the
// merges against counts made afresh from the merged words.
func TestIncrementalCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	counts := map[string]int64{}
	alphabet := []string{"a", "b", "c", "aa", "ab", " "}
	for range 3000 {
		var b strings.Builder
		for range 2 + rng.IntN(10) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		counts[b.String()] += 1 + int64(rng.IntN(5))
	}
	tr := newTrainer(counts, Options{MinFrequency: 1})
	tr.run(256 + 300)
	fresh := map[uint64]int64{}
	for _, w := range tr.words {
		for i := 0; i+1 < len(w.syms); i++ {
			fresh[pair{w.syms[i], w.syms[i+1]}.key()] += w.count
		}
	}
	for k, c := range tr.counts {
		if c != fresh[k] {
			t.Errorf("pair %v: kept count %d, recounted %d", pairOf(k), c, fresh[k])
		}
	}
	for k, c := range fresh {
		if tr.counts[k] != c {
			if _, merged := tr.merged[k]; !merged {
				t.Errorf("pair %v: recounted %d, kept %d", pairOf(k), c, tr.counts[k])
			}
		}
		if l := tr.where[k]; c > 0 && l == nil {
			t.Errorf("pair %v occurs but has no words", pairOf(k))
		}
	}
	if len(tr.merges) < 100 {
		t.Fatalf("only %d merges", len(tr.merges))
	}
}
