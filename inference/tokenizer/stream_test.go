package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamAll feeds ids one at a time and returns the pieces, Flush last.
func streamAll(tok *Tokenizer, ids []int, skipSpecial bool) []string {
	d := tok.NewDecoder(skipSpecial)
	var out []string
	for _, id := range ids {
		out = append(out, d.Add(id))
	}
	return append(out, d.Flush())
}

func TestStreamEmojiAcrossTokens(t *testing.T) {
	tests := []struct {
		file   string
		tokens []string
		want   []string // one per Add, then Flush
	}{
		// A byte-level emoji split over three tokens, one of them two bytes.
		{"tiny_bytelevel.json", []string{"Ġthe", "Ġ", "ðŁ", "ĺ", "Ģ", "Ġthe"}, []string{" the", " ", "", "", "😀", " the", ""}},
		// Byte fallback: four byte tokens; the sentencepiece space is dropped at the start only.
		{"tiny_fallback.json", []string{"▁hi", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "▁c"}, []string{"hi", " ", "", "", "", "😀", " c", ""}},
		// Metaspace: the first token loses its ▁, later ones keep it as a space.
		{"tiny_metaspace.json", []string{"▁a", "▁b", "c", "▁a"}, []string{"a", " b", "c", " a", ""}},
	}
	for _, tt := range tests {
		tok := loadTiny(t, tt.file)
		got := streamAll(tok, ids(t, tok, tt.tokens...), false)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: stream %q = %q, want %q", tt.file, tt.tokens, got, tt.want)
		}
	}
}

func TestStreamFlushIncomplete(t *testing.T) {
	tok := loadTiny(t, "tiny_fallback.json")
	d := tok.NewDecoder(false)
	for _, id := range ids(t, tok, "▁a", "<0xF0>", "<0x9F>") {
		d.Add(id)
	}
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %+q, want U+FFFD", got)
	}
	// After Flush the decoder starts afresh.
	if got := d.Add(ids(t, tok, "▁c")[0]); got != "c" {
		t.Errorf("Add after Flush = %q, want %q", got, "c")
	}
	// An invalid run is emitted as U+FFFD once the next token shows it cannot complete.
	d = tok.NewDecoder(false)
	var out []string
	for _, id := range ids(t, tok, "▁a", "<0xE2>", "<0x82>", "▁c") {
		out = append(out, d.Add(id))
	}
	if want := []string{"a", "", "", "\uFFFD c"}; !slices.Equal(out, want) {
		t.Errorf("stream of an invalid run = %q, want %q", out, want)
	}
}

func TestStreamSkipSpecial(t *testing.T) {
	tok := loadTiny(t, "tiny_bytelevel.json")
	seq := ids(t, tok, "<|bos|>", "he", "llo", "<|end|>")
	if got := strings.Join(streamAll(tok, seq, true), ""); got != "hello" {
		t.Errorf("stream, skipSpecial = %q, want %q", got, "hello")
	}
	if got := strings.Join(streamAll(tok, seq, false), ""); got != "<|bos|>hello<|end|>" {
		t.Errorf("stream = %q, want %q", got, "<|bos|>hello<|end|>")
	}
}

// TestStreamMatchesDecode streams the ids of every golden string through each
// fixture tokenizer: the pieces must be valid UTF-8 and add up to Decode.
func TestStreamMatchesDecode(t *testing.T) {
	for _, name := range []string{"qwen3", "llama2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tok := fixtureTokenizer(t, name)
			for _, c := range readGoldens(t, name) {
				for _, skip := range []bool{false, true} {
					pieces := streamAll(tok, c.IDsSpecial, skip)
					for _, p := range pieces {
						if !utf8.ValidString(p) {
							t.Errorf("%+q: piece %+q is not UTF-8", c.Text, p)
						}
					}
					if got, want := strings.Join(pieces, ""), tok.Decode(c.IDsSpecial, skip); got != want {
						t.Errorf("%+q (skipSpecial %v): stream %+q, Decode %+q", c.Text, skip, got, want)
					}
				}
			}
		})
	}
}
