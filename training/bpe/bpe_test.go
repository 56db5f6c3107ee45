package bpe_test

import (
	"bytes"
	"iter"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/training/bpe"
)

var chatSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

func train(t testing.TB, texts []string, opts bpe.Options) *bpe.Result {
	t.Helper()
	return trainSeq(t, slices.Values(texts), opts)
}

func trainSeq(t testing.TB, texts iter.Seq[string], opts bpe.Options) *bpe.Result {
	t.Helper()
	r, err := bpe.Train(texts, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func load(t testing.TB, r *bpe.Result) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.FromJSONWithConfig(r.JSON(), r.TokenizerConfigJSON(bpe.ChatMLTemplate))
	if err != nil {
		t.Fatalf("inference/tokenizer rejects the trained tokenizer: %v", err)
	}
	return tok
}

// TestFirstMerges checks a tiny corpus by hand. Words: "hug" 1, " hug" 2,
// " pug" 1, " pun" 1, " bun" 1, " hugs" 1 (Ġ is the space).
//  1. u g: 5 (hug, Ġhug×2, Ġpug, Ġhugs)      → ug
//  2. h ug: 4 (hug, Ġhug×2, Ġhugs)           → hug
//  3. Ġ hug: 3 (Ġhug×2, Ġhugs)               → Ġhug
//  4. u n: 2 (Ġpun, Ġbun) ties Ġ p: 2 (Ġpug, Ġpun); "u" < "Ġ" in byte order
//  5. Ġ p: 2                                  → Ġp
//
// Then every pair occurs once, below MinFrequency 2.
func TestFirstMerges(t *testing.T) {
	r := train(t, []string{"hug hug hug pug pun bun hugs"}, bpe.Options{VocabSize: 1000, SpecialTokens: chatSpecials})
	want := [][2]string{{"u", "g"}, {"h", "ug"}, {"Ġ", "hug"}, {"u", "n"}, {"Ġ", "p"}}
	if !slices.Equal(r.Merges, want) {
		t.Fatalf("merges %q, want %q", r.Merges, want)
	}
	if len(r.Vocab) != 256+5+3 || r.NumSpecial != 3 {
		t.Fatalf("vocab size %d (%d special), want 264 (3)", len(r.Vocab), r.NumSpecial)
	}
	for id, tok := range map[int]string{0: "!", 32: "A", 220: "Ġ", 255: "Ń", 256: "ug", 257: "hug", 258: "Ġhug", 259: "un", 260: "Ġp",
		261: "<|endoftext|>", 262: "<|im_start|>", 263: "<|im_end|>"} {
		if r.Vocab[id] != tok {
			t.Errorf("id %d is %q, want %q", id, r.Vocab[id], tok)
		}
	}
	if r.Stats.LastCount != 2 || r.Stats.DistinctWords != 6 || r.Stats.Words != 7 {
		t.Errorf("stats %+v", r.Stats)
	}
	tok := load(t, r)
	ids, err := tok.Encode("hug hugs pun", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{257, 258, 82, 260, 259}; !slices.Equal(ids, want) { // hug Ġhug s Ġp un
		t.Errorf("Encode = %v, want %v", ids, want)
	}
}

func TestVocabSizeReached(t *testing.T) {
	text := englishText(200_000, 1)
	r := train(t, []string{text}, bpe.Options{VocabSize: 1000, SpecialTokens: chatSpecials})
	if len(r.Vocab) != 1000 {
		t.Fatalf("vocab %d, want 1000", len(r.Vocab))
	}
	if len(r.Merges) < 1000-256-3 {
		t.Fatalf("%d merges for %d merged tokens", len(r.Merges), 1000-256-3)
	}
	seen := map[string]bool{}
	for _, tok := range r.Vocab {
		if seen[tok] {
			t.Fatalf("token %q twice", tok)
		}
		seen[tok] = true
	}
}

func TestDeterministic(t *testing.T) {
	var texts []string
	for i := range 40 {
		texts = append(texts, englishText(20_000, uint64(i)))
	}
	opts := bpe.Options{VocabSize: 2000, SpecialTokens: chatSpecials}
	a := train(t, texts, opts)
	opts.Workers = 1
	b := train(t, texts, opts)
	// The texts in another order, on another number of workers.
	opts.Workers = 3
	c := trainSeq(t, func(yield func(string) bool) {
		for _, s := range slices.Backward(texts) {
			if !yield(s) {
				return
			}
		}
	}, opts)
	ja := a.JSON()
	if !bytes.Equal(ja, b.JSON()) || !bytes.Equal(ja, c.JSON()) {
		t.Fatal("same text, different tokenizer.json")
	}
	if !bytes.Equal(a.TokenizerConfigJSON(""), b.TokenizerConfigJSON("")) {
		t.Fatal("same text, different tokenizer_config.json")
	}
}

// randomText mixes ASCII, whitespace of all kinds, contractions, accents,
// CJK, emoji (with joiners), combining marks and special tokens.
func randomText(rng *rand.Rand, n int) string {
	pieces := []string{"a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "'s", "'ll", "'", "don't", "123", "4", ",", ".", "?!",
		"é", "ü", "ß", "日本語", "中文", "한국어", "Ελληνικά", "русский", "😀", "👩‍💻", "🇩🇪", "\u0301", "\u00a0", "\u2028",
		"\u3000", "\x00", "\x7f", "\ufeff", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im", "|>", "<", "𝔘𝔫𝔦"}
	var b strings.Builder
	for range n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func TestRoundTrip(t *testing.T) {
	text := englishText(300_000, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{text, randomText(rng, 2000)}
	r := train(t, texts, bpe.Options{VocabSize: 1500, SpecialTokens: chatSpecials})
	tok := load(t, r)
	if tok.VocabSize() != len(r.Vocab) {
		t.Fatalf("VocabSize %d, want %d", tok.VocabSize(), len(r.Vocab))
	}
	cases := []string{"", " ", "Hello, world!", "  leading and trailing  ", "日本語のテキスト 😀👍🏽 naïve café",
		"<|im_start|>user\nhi<|im_end|>\n", "tabs\tand\r\nCRLF", "\x00\x01\x02 control", "🧑‍🤝‍🧑"}
	for range 300 {
		cases = append(cases, randomText(rng, 1+rng.IntN(40)))
	}
	for _, s := range cases {
		ids, err := tok.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Decode(ids, false); got != s {
			t.Fatalf("round trip of %q gave %q (ids %v)", s, got, ids)
		}
	}
	// Every byte has a token, so even invalid UTF-8 encodes (as U+FFFD).
	ids, err := tok.Encode("a\xffb", false)
	if err != nil || tok.Decode(ids, false) != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8: %v %q", err, tok.Decode(ids, false))
	}
	// The trainer's count of tokens in its own text is what the encoder
	// finds: the same split, the same merges in the same order.
	n := 0
	for _, s := range texts {
		ids, _ := tok.Encode(s, false)
		for _, id := range ids {
			if !tok.IsSpecial(id) {
				n++
			}
		}
	}
	if int64(n) != r.Stats.Tokens {
		t.Errorf("encoder makes %d tokens of the training text, trainer %d", n, r.Stats.Tokens)
	}
}

func TestSpecialTokens(t *testing.T) {
	// Special tokens everywhere in the training text must not become merges.
	var b strings.Builder
	for i := range 2000 {
		b.WriteString("<|im_start|>user\nquestion number one<|im_end|>\n<|im_start|>assistant\nanswer<|im_end|>\n<|endoftext|>")
		if i%3 == 0 {
			b.WriteString("x<|endoftext|>y")
		}
	}
	r := train(t, []string{b.String()}, bpe.Options{VocabSize: 400, SpecialTokens: chatSpecials, EOSToken: "<|im_end|>", PadToken: "<|endoftext|>"})
	for _, tok := range r.Vocab[:len(r.Vocab)-r.NumSpecial] {
		if strings.Contains(tok, "<|") || strings.Contains(tok, "|>") || strings.Contains(tok, "im_") {
			t.Errorf("merged token %q spans a special token", tok)
		}
	}
	tok := load(t, r)
	start, _ := r.SpecialID("<|im_start|>")
	end, _ := r.SpecialID("<|im_end|>")
	eot, _ := r.SpecialID("<|endoftext|>")
	if start != len(r.Vocab)-2 || end != len(r.Vocab)-1 || eot != len(r.Vocab)-3 {
		t.Fatalf("special ids %d %d %d, vocab %d", eot, start, end, len(r.Vocab))
	}
	if eos := tok.EOS(); !slices.Equal(eos, []int{end}) {
		t.Errorf("EOS %v, want [%d]", eos, end)
	}
	text := "a<|im_start|><|im_end|>b<|endoftext|><|im_start|"
	ids, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	var specials []int
	for _, id := range ids {
		if tok.IsSpecial(id) {
			specials = append(specials, id)
		}
	}
	if !slices.Equal(specials, []int{start, end, eot}) {
		t.Errorf("special ids in %q: %v, want [%d %d %d]", text, specials, start, end, eot)
	}
	if got := tok.Decode(ids, true); got != "ab<|im_start|" {
		t.Errorf("Decode(skip special) = %q", got)
	}
}

func TestTokenizerConfig(t *testing.T) {
	r := train(t, []string{"some text"}, bpe.Options{VocabSize: 300, SpecialTokens: chatSpecials, ModelMaxLength: 2048})
	cfg := string(r.TokenizerConfigJSON(bpe.ChatMLTemplate))
	for _, want := range []string{`"eos_token": "<|endoftext|>"`, `"pad_token": "<|endoftext|>"`, `"bos_token": null`,
		`"chat_template": "{% for message in messages %}`, `"model_max_length": 2048`, `"add_bos_token": false`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("tokenizer_config.json lacks %s:\n%s", want, cfg)
		}
	}
	if strings.Contains(string(r.TokenizerConfigJSON("")), "chat_template") {
		t.Error("chat_template written without a template")
	}
	dir := t.TempDir()
	if err := r.WriteFiles(dir, bpe.ChatMLTemplate); err != nil {
		t.Fatal(err)
	}
	if _, err := tokenizer.Load(dir); err != nil {
		t.Fatal(err)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []bpe.Options{
		{VocabSize: 100},
		{VocabSize: 258, SpecialTokens: chatSpecials},
		{VocabSize: 300, SpecialTokens: []string{"<a>", "<a>"}},
		{VocabSize: 300, SpecialTokens: []string{""}},
		{VocabSize: 300, SpecialTokens: chatSpecials, BOSToken: "<s>"},
	} {
		if _, err := bpe.TrainStrings(nil, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	// No text: the 256 bytes and the special tokens.
	r := train(t, nil, bpe.Options{VocabSize: 300, SpecialTokens: chatSpecials})
	if len(r.Vocab) != 259 {
		t.Errorf("empty corpus: vocab %d", len(r.Vocab))
	}
	load(t, r)
}

func TestMaxTokenBytes(t *testing.T) {
	r := train(t, []string{englishText(100_000, 3)}, bpe.Options{VocabSize: 800, MaxTokenBytes: 4})
	for _, m := range r.Merges {
		if n := utf8.RuneCountInString(m[0] + m[1]); n > 4 {
			t.Fatalf("merge %q makes %d bytes", m, n)
		}
	}
	load(t, r)
}

// TestCompression reports characters per token on English text the
// tokenizer was not trained on.
func TestCompression(t *testing.T) {
	train1 := englishText(2_000_000, 11)
	held := englishText(200_000, 12)
	for _, size := range []int{1024, 4096, 8192} {
		r := train(t, []string{train1}, bpe.Options{VocabSize: size, SpecialTokens: chatSpecials})
		tok := load(t, r)
		ids, _ := tok.Encode(held, false)
		ratio := float64(utf8.RuneCountInString(held)) / float64(len(ids))
		t.Logf("vocab %5d (%d merges): %.2f chars/token on held-out generated English; count %v, merge %v",
			len(r.Vocab), len(r.Merges), ratio, r.Stats.CountTime, r.Stats.MergeTime)
		if ratio < 2.5 {
			t.Errorf("vocab %d: %.2f chars/token, want at least 2.5", size, ratio)
		}
	}
	// Real prose, where the system has some (the tests do not need it): the
	// license texts, GPL-3 held out.
	const dir = "/usr/share/common-licenses"
	gpl, err := os.ReadFile(dir + "/GPL-3")
	if err != nil {
		return
	}
	var licenses []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if data, err := os.ReadFile(dir + "/" + e.Name()); err == nil && e.Type().IsRegular() && !strings.HasPrefix(e.Name(), "GPL-3") {
			licenses = append(licenses, string(data))
		}
	}
	for _, size := range []int{1024, 4096} {
		r := train(t, licenses, bpe.Options{VocabSize: size, SpecialTokens: chatSpecials})
		tok := load(t, r)
		ids, _ := tok.Encode(string(gpl), false)
		t.Logf("vocab %5d trained on %d other license texts (%d KB): %.2f chars/token on GPL-3", len(r.Vocab), len(licenses),
			r.Stats.Bytes>>10, float64(utf8.RuneCount(gpl))/float64(len(ids)))
	}
}

func BenchmarkTrain5MB(b *testing.B) {
	text := englishText(5<<20, 42)
	var texts []string
	for p := range strings.SplitSeq(text, "\n\n") {
		texts = append(texts, p+"\n\n")
	}
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		r, err := bpe.TrainStrings(texts, bpe.Options{VocabSize: 8192, SpecialTokens: chatSpecials})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.Stats.CountTime.Seconds(), "count-s")
		b.ReportMetric(r.Stats.MergeTime.Seconds(), "merge-s")
	}
}
