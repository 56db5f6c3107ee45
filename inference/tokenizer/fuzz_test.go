package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// optionalFixture returns a fixture tokenizer, or nil when fixtures are absent
// (fuzzing then runs on the hand-made tokenizers only).
func optionalFixture(t testing.TB, name string) *Tokenizer {
	if _, err := os.Stat(filepath.Join(fixturesRoot, fixtureProbes[name])); err != nil {
		return nil
	}
	return fixtureTokenizer(t, name)
}

func addHardSeeds(f *testing.F) {
	for _, s := range hardStrings(f) {
		f.Add(s)
	}
	for _, s := range []string{"\xff\xfe", "a\xe2\x82", "\xf0\x9f\x98", "'S'LL'ſ", "\r\n\r\n  \n", "  ", " \u00a0\u0085x", "<s></s><unk>", "▁▁a▁"} {
		f.Add(s)
	}
}

// FuzzTokenizer checks that encode then decode gives the text back — exactly
// for byte-level BPE, up to NFC for Qwen3, up to sentencepiece's ▁ for byte
// fallback — that streaming agrees with Decode, and that nothing panics.
func FuzzTokenizer(f *testing.F) {
	addHardSeeds(f)
	type subject struct {
		name string
		tok  *Tokenizer
		want func(string) (string, bool) // expected round trip, false to skip
	}
	exact := func(s string) (string, bool) { return s, true }
	sentencepiece := func(s string) (string, bool) {
		for _, special := range []string{"<s>", "</s>", "<unk>"} {
			if strings.Contains(s, special) {
				return "", false // decoding puts the sentencepiece space after a special token
			}
		}
		return strings.ReplaceAll(s, "▁", " "), true
	}
	subjects := []subject{
		{"tiny_bytelevel", loadTiny(f, "tiny_bytelevel.json"), exact},
		{"tiny_fallback", loadTiny(f, "tiny_fallback.json"), sentencepiece},
	}
	if tok := optionalFixture(f, "gpt2"); tok != nil {
		subjects = append(subjects, subject{"gpt2", tok, exact})
	}
	if tok := optionalFixture(f, "qwen3"); tok != nil {
		subjects = append(subjects, subject{"qwen3", tok, func(s string) (string, bool) { return NFC(s), true }})
	}
	if tok := optionalFixture(f, "llama2"); tok != nil {
		subjects = append(subjects, subject{"llama2", tok, sentencepiece})
	}
	f.Fuzz(func(t *testing.T, s string) {
		valid := strings.ToValidUTF8(s, "\uFFFD")
		for _, sub := range subjects {
			ids, err := sub.tok.Encode(s, false)
			if err != nil {
				t.Fatalf("%s: Encode(%+q): %v", sub.name, s, err)
			}
			withSpecial, err := sub.tok.Encode(s, true)
			if err != nil {
				t.Fatalf("%s: Encode(%+q, true): %v", sub.name, s, err)
			}
			for _, id := range withSpecial {
				if _, ok := sub.tok.Token(id); !ok {
					t.Fatalf("%s: Encode(%+q) gave unknown id %d", sub.name, s, id)
				}
			}
			got := sub.tok.Decode(ids, false)
			if want, ok := sub.want(valid); ok && got != want {
				t.Errorf("%s: Decode(Encode(%+q)) = %+q, want %+q", sub.name, s, got, want)
			}
			for _, skip := range []bool{false, true} {
				stream := strings.Join(streamAll(sub.tok, withSpecial, skip), "")
				if dec := sub.tok.Decode(withSpecial, skip); stream != dec {
					t.Errorf("%s: stream of %+q = %+q, Decode %+q", sub.name, s, stream, dec)
				}
			}
		}
	})
}

// FuzzScanners holds the native pre-tokenizer scanners equal to regexp2
// running the patterns they stand for.
func FuzzScanners(f *testing.F) {
	addHardSeeds(f)
	type pair struct {
		name           string
		native, regexp matcher
	}
	var pairs []pair
	for name, expr := range map[string]string{"gpt2": gpt2Pattern, "llama3": llama3Pattern, "qwen2": qwen2Pattern} {
		native, err := compileRegex(expr, true)
		if err != nil {
			f.Fatal(err)
		}
		re, err := compileRegex(expr, false)
		if err != nil {
			f.Fatal(err)
		}
		if _, ok := native.(regexMatcher); ok {
			f.Fatalf("%s: no native scanner", name)
		}
		pairs = append(pairs, pair{name, native, re})
	}
	matches := func(m matcher, s string) (out [][2]int) {
		if err := m.find(s, func(a, b int) { out = append(out, [2]int{a, b}) }); err != nil {
			panic(err)
		}
		return out
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0x17F) {
			// U+017F LONG S folds to s; Oniguruma and JavaScript match it in
			// (?i:'s), regexp2 does not. The scanners follow the former.
			return
		}
		for _, p := range pairs {
			got, want := matches(p.native, s), matches(p.regexp, s)
			if !slices.Equal(got, want) {
				t.Errorf("%s on %+q:\nnative %v\nregexp %v", p.name, s, got, want)
			}
		}
	})
}

func TestContractionFoldsLongS(t *testing.T) {
	got := preTokenizeJSON(t, `{"type":"Split","pattern":{"Regex":"`+jsonEscape(qwen2Pattern)+`"},"behavior":"Isolated"}`, "it'ſ")
	if want := []string{"it", "'ſ"}; !slices.Equal(got, want) {
		t.Errorf("split = %q, want %q", got, want)
	}
	if !utf8.ValidString(got[1]) {
		t.Error("invalid UTF-8")
	}
}
