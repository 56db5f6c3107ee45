package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// mergeOrderJSON is a BPE model without a pre-tokenizer, so a text is one word:
// "a a" can apply at several places at once, and ranks decide between rules.
const mergeOrderJSON = `{
 "model": {
  "type": "BPE",
  "vocab": {"a": 0, "b": 1, "c": 2, "aa": 3, "bc": 4, "ab": 5, "abc": 6},
  "merges": ["a a", "b c", "a b", "a bc"]
 }
}`

// TestBPEMergeOrder holds both merge loops (the scan for short words, the heap
// for long ones) to BPE's order: the lowest rank first, and among pairs of the
// same rank the leftmost. The differential tests against real vocabularies
// check this too, but only where the fixtures were fetched; this runs anywhere.
func TestBPEMergeOrder(t *testing.T) {
	tok, err := FromJSON([]byte(mergeOrderJSON))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text string
		want []string
	}{
		{"aaa", []string{"aa", "a"}},         // not a, aa
		{"aaaaa", []string{"aa", "aa", "a"}}, // not a, aa, aa
		{"baaa", []string{"b", "aa", "a"}},   // ties after another symbol
		{"abc", []string{"abc"}},             // b c (rank 1) before a b (rank 2), then a bc
		{"aabc", []string{"aa", "bc"}},       // a a, then b c; a b never gets its turn
		{"cab", []string{"c", "ab"}},
		{strings.Repeat("a", 13), append(slices.Repeat([]string{"aa"}, 6), "a")},
		{strings.Repeat("a", 11) + "bc", append(slices.Repeat([]string{"aa"}, 5), "abc")},
	}
	defer func(n int) { smallWord = n; tok.model.clearCache() }(smallWord)
	for _, path := range []struct {
		name  string
		small int
	}{{"scan", 1 << 30}, {"heap", 0}, {"default", smallWord}} {
		smallWord = path.small
		tok.model.clearCache()
		for _, c := range cases {
			got, err := tok.Encode(c.text, false)
			if err != nil {
				t.Fatal(err)
			}
			if want := ids(t, tok, c.want...); !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q) = %v, want %v %q", path.name, c.text, got, want, c.want)
			}
		}
	}
}
