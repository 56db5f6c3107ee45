package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// loadTiny reads one of the hand-made tokenizers in testdata.
func loadTiny(t testing.TB, name string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tok
}

// ids looks up token strings.
func ids(t testing.TB, tok *Tokenizer, tokens ...string) []int {
	t.Helper()
	out := make([]int, len(tokens))
	for i, s := range tokens {
		id, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		out[i] = id
	}
	return out
}

type encodeCase struct {
	text       string
	addSpecial bool
	want       []string // token strings
}

func checkEncode(t *testing.T, tok *Tokenizer, cases []encodeCase) {
	t.Helper()
	for _, c := range cases {
		got, err := tok.Encode(c.text, c.addSpecial)
		if err != nil {
			t.Fatalf("Encode(%+q): %v", c.text, err)
		}
		if want := ids(t, tok, c.want...); !slices.Equal(got, want) {
			t.Errorf("Encode(%+q, %v) = %v, want %v %q", c.text, c.addSpecial, got, want, c.want)
		}
	}
}

func TestByteLevelBPE(t *testing.T) {
	tok := loadTiny(t, "tiny_bytelevel.json")
	checkEncode(t, tok, []encodeCase{
		{"hello the", false, []string{"he", "llo", "Ġthe"}},
		{"hello the", true, []string{"<|bos|>", "he", "llo", "Ġthe"}},
		{"", true, []string{"<|bos|>"}},
		{"hello<|end|>", false, []string{"he", "llo", "<|end|>"}},
		{"😀", false, []string{"ðŁ", "ĺ", "Ģ"}},
		{"a  b\n", false, []string{"a", "Ġ", "Ġ", "b", "Ċ"}},
	})
	for _, s := range []string{"hello the", "😀 <|end|> x\t\n  y ", "日本語", ""} {
		got, _ := tok.Encode(s, false)
		if dec := tok.Decode(got, false); dec != s {
			t.Errorf("Decode(Encode(%+q)) = %+q", s, dec)
		}
	}
	got, _ := tok.Encode("<|bos|>hi<|end|>", false)
	if dec := tok.Decode(got, true); dec != "hi" {
		t.Errorf("Decode(skipSpecial) = %+q, want %q", dec, "hi")
	}
	if bos, ok := tok.BOS(); !ok || bos != 300 {
		t.Errorf("BOS = %d, %v, want 300 (from the template)", bos, ok)
	}
	if eos := tok.EOS(); !slices.Equal(eos, []int{301}) {
		t.Errorf("EOS = %v, want [301] (<|end|>)", eos)
	}
}

func TestByteFallbackBPE(t *testing.T) {
	tok := loadTiny(t, "tiny_fallback.json")
	checkEncode(t, tok, []encodeCase{
		{"ab c", false, []string{"▁ab", "▁c"}},
		{"ab c", true, []string{"<s>", "▁ab", "▁c"}},
		{"é", false, []string{"▁", "<0xC3>", "<0xA9>"}},
		{"hi 😀", false, []string{"▁hi", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}},
		{"<s>hi", false, []string{"<s>", "▁hi"}},
		{"  a", false, []string{"▁", "▁", "▁a"}},
	})
	for _, s := range []string{"ab c", "hi 😀 é", "  leading", "trailing  ", ""} {
		got, _ := tok.Encode(s, true)
		if dec := tok.Decode(got, true); dec != s {
			t.Errorf("Decode(Encode(%+q)) = %+q", s, dec)
		}
	}
	// A byte run that is not UTF-8 decodes to U+FFFD, never to invalid text.
	bad := ids(t, tok, "▁a", "<0xE2>", "<0x82>", "▁c")
	if got := tok.Decode(bad, false); got != "a\uFFFD c" {
		t.Errorf("Decode(invalid bytes) = %+q, want %+q", got, "a\uFFFD c")
	}
}

func TestMetaspace(t *testing.T) {
	tok := loadTiny(t, "tiny_metaspace.json")
	checkEncode(t, tok, []encodeCase{
		{"a bc", false, []string{"▁a", "▁b", "c"}},     // "▁ b" outranks "b c"
		{"xyz a", false, []string{"▁", "<unk>", "▁a"}}, // unknown run fused into one <unk>
		{"a <mask>", false, []string{"▁a", "<mask>"}},  // lstrip swallows the space
		{"<mask>a", false, []string{"<mask>", "a"}},    // prepend_scheme first: not at the start
	})
	if got := tok.Decode(ids(t, tok, "▁a", "▁bc", "▁", "c"), false); got != "a bc c" {
		t.Errorf("Decode = %q, want %q", got, "a bc c")
	}
}

func TestAddedTokens(t *testing.T) {
	vocab := map[string]int{}
	for i, r := range "abcdefghijklmnopqrstuvwxyz<>[]" {
		vocab[string(r)] = i
	}
	file := map[string]any{
		"normalizer":    map[string]any{"type": "Lowercase"},
		"pre_tokenizer": map[string]any{"type": "WhitespaceSplit"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"added_tokens": []map[string]any{
			{"id": 100, "content": "[A]", "rstrip": true, "special": true},
			{"id": 101, "content": "[B]", "lstrip": true, "special": true},
			{"id": 102, "content": "cat", "single_word": true},
			{"id": 103, "content": "dog", "normalized": true},
			{"id": 104, "content": "<a>", "special": true},
			{"id": 105, "content": "<a><b>", "special": true},
		},
	}
	data, _ := json.Marshal(file)
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		text string
		want []int
	}{
		{"x [B]", []int{23, 101}},
		{"[A]  y", []int{100, 24}},
		{"cat concat cats", []int{102, 2, 14, 13, 2, 0, 19, 2, 0, 19, 18}},
		{"DOG", []int{103}},
		{"<a><b>", []int{105}},
		{"<a><c>", []int{104, 26, 2, 27}},
	}
	for _, tt := range tests {
		got, err := tok.Encode(tt.text, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
	if !tok.IsSpecial(100) || tok.IsSpecial(102) {
		t.Errorf("IsSpecial: [A] %v, cat %v; want true, false", tok.IsSpecial(100), tok.IsSpecial(102))
	}
}

// preTokenizeJSON runs a pre-tokenizer given as JSON on one text.
func preTokenizeJSON(t *testing.T, js, text string) []string {
	t.Helper()
	p, err := parsePreTokenizer(json.RawMessage(js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	var out []string
	if err := p.preTokenize(word{text: text, first: true}, func(w word) { out = append(out, w.mapped().text) }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		js, text string
		want     []string
	}{
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Removed","invert":false}`, "the-final--countdown", []string{"the", "final", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Isolated","invert":false}`, "the-final--countdown", []string{"the", "-", "final", "-", "-", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"MergedWithPrevious","invert":false}`, "the-final--countdown", []string{"the-", "final-", "-", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"MergedWithNext","invert":false}`, "the-final--countdown", []string{"the", "-final", "-", "-countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Contiguous","invert":false}`, "the-final--countdown", []string{"the", "-", "final", "--", "countdown"}},
		{`{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Removed","invert":true}`, "hi, you", []string{"hi", "you"}},
		{`{"type":"Digits","individual_digits":true}`, "a123b", []string{"a", "1", "2", "3", "b"}},
		{`{"type":"Digits","individual_digits":false}`, "a123b", []string{"a", "123", "b"}},
		{`{"type":"Punctuation","behavior":"Isolated"}`, "Hey, friend!", []string{"Hey", ",", " friend", "!"}},
		{`{"type":"Whitespace"}`, "Hey friend!  How?", []string{"Hey", "friend", "!", "How", "?"}},
		{`{"type":"WhitespaceSplit"}`, "Hey  friend!\t", []string{"Hey", "friend!"}},
		{`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`, "hello world", []string{"Ġhello", "Ġworld"}},
		{`{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}`, "a b", []string{"aĠb"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey  friend", []string{"▁Hey", "▁", "▁friend"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":false}`, "Hey friend", []string{"Hey▁friend"}},
		{`{"type":"Metaspace","replacement":"▁","add_prefix_space":true}`, "a b", []string{"▁a", "▁b"}},
		{`{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Digits","individual_digits":true}]}`, "ab12 c3", []string{"ab", "1", "2", "c", "3"}},
		{`{"type":"Split","pattern":{"Regex":"` + jsonEscape(llama3Pattern) + `"},"behavior":"Isolated","invert":false}`, "I'M 12345 fine\n\n  ok", []string{"I", "'M", " ", "123", "45", " fine", "\n\n", " ", " ok"}},
	}
	for _, tt := range tests {
		if got := preTokenizeJSON(t, tt.js, tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("%s on %q = %q, want %q", tt.js, tt.text, got, tt.want)
		}
	}
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func TestNormalizers(t *testing.T) {
	tests := []struct {
		js, in, want string
	}{
		{`{"type":"Lowercase"}`, "HeLLo İ", "hello i\u0307"},
		{`{"type":"Strip","strip_left":true,"strip_right":false}`, "  a  ", "a  "},
		{`{"type":"Strip","strip_left":true,"strip_right":true}`, "\u3000a\n", "a"},
		{`{"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "}`, "a \t\n b", "a b"},
		{`{"type":"Replace","pattern":{"String":"$"},"content":"$1"}`, "a$b", "a$1b"},
		{`{"type":"Prepend","prepend":"▁"}`, "", ""},
		{`{"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"},{"type":"Lowercase"}]}`, "Ångström", "angstrom"},
		{`{"type":"NFC"}`, "e\u0301", "\u00e9"},
	}
	for _, tt := range tests {
		n, err := parseNormalizer(json.RawMessage(tt.js))
		if err != nil {
			t.Fatalf("%s: %v", tt.js, err)
		}
		if got, _ := n.normalize(tt.in); got != tt.want {
			t.Errorf("%s(%+q) = %+q, want %+q", tt.js, tt.in, got, tt.want)
		}
	}
}

func TestDecoders(t *testing.T) {
	tests := []struct {
		js     string
		tokens []string
		want   string
	}{
		{`{"type":"ByteLevel"}`, []string{"Ġhello", "<|im_end|>", "Ċ"}, " hello<|im_end|>\n"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always"}`, []string{"▁a▁b", "▁c"}, "ab c"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never"}`, []string{"▁a", "▁c"}, " a c"},
		{`{"type":"BPEDecoder","suffix":"</w>"}`, []string{"hel", "lo</w>", "world</w>"}, "hello world"},
		{`{"type":"Strip","content":"x","start":2,"stop":1}`, []string{"xxxax", "xb"}, "xab"},
		{`{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Fuse"}]}`, []string{"<0xE2>", "<0x82>", "<0xAC>", "!"}, "€!"},
	}
	for _, tt := range tests {
		d, err := parseDecoder(json.RawMessage(tt.js))
		if err != nil {
			t.Fatalf("%s: %v", tt.js, err)
		}
		if got := strings.Join(d.decode(slices.Clone(tt.tokens)), ""); got != tt.want {
			t.Errorf("%s(%q) = %+q, want %+q", tt.js, tt.tokens, got, tt.want)
		}
	}
}

func TestPostProcessors(t *testing.T) {
	lookup := func(s string) (int, bool) { return map[string]int{"<s>": 0, "</s>": 2}[s], s == "<s>" || s == "</s>" }
	tests := []struct {
		js   string
		want []int
	}{
		{`{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],"trim_offsets":true,"add_prefix_space":true}`, []int{0, 7, 8, 2}},
		{`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],"special_tokens":{}}`, []int{0, 7, 8, 2}},
		{`{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[0],"tokens":["<s>"]}}}]}`, []int{0, 7, 8}},
	}
	for _, tt := range tests {
		p, err := parsePostProcessor(json.RawMessage(tt.js), lookup)
		if err != nil {
			t.Fatalf("%s: %v", tt.js, err)
		}
		if got := p.apply([]int{7, 8}); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.js, got, tt.want)
		}
	}
}

func TestUnsupportedComponents(t *testing.T) {
	base := `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}`
	tests := []struct{ js, wantInErr string }{
		{`{"model":{"type":"Unigram","vocab":[["a",0.0]]}}`, `"Unigram"`},
		{`{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `"WordPiece"`},
		{base + `,"normalizer":{"type":"Precompiled","precompiled_charsmap":""}}`, `"Precompiled"`},
		{base + `,"normalizer":{"type":"NFKC"}}`, `"NFKC"`},
		{base + `,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"UnicodeScripts"}]}}`, `"UnicodeScripts"`},
		{base + `,"decoder":{"type":"CTC"}}`, `"CTC"`},
		{base + `,"post_processor":{"type":"Mystery"}}`, `"Mystery"`},
		{base + `,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated"}}`, "regex"},
		{base + `,"pre_tokenizer":{"type":"Split","pattern":{"String":"x"},"behavior":"Sideways"}}`, `"Sideways"`},
		{`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}}`, "not in the vocabulary"},
		{`{"model":{"type":"BPE","vocab":{"a":0},"merges":["ab"]}}`, "merge"},
		{`{"model":{"type":"BPE","vocab":{"a":-4},"merges":[]}}`, "id -4"},
		{`{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"}}`, "unk_token"},
		{`{"added_tokens":[{"id":99999999999,"content":"x"}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, "id"},
		{`{"model":{"type":"BPE","vocab":{"a":0,"b":16000000},"merges":[]}}`, "ids up to"},
		{base + `,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"id":"<s>","ids":[7]}}}}`, "id 7"},
		{`{}`, "model"},
		{`not json`, "invalid"},
	}
	for _, tt := range tests {
		_, err := FromJSON([]byte(tt.js))
		if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
			t.Errorf("FromJSON(%s): error %v, want one containing %s", tt.js, err, tt.wantInErr)
		}
	}
	if _, err := FromJSON(make([]byte, MaxTokenizerJSON+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized file: error %v, want ErrTooLarge", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("testdata", "tiny_fallback.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(data))
	write("tokenizer_config.json", `{"bos_token":{"__type":"AddedToken","content":"<s>"},"eos_token":"</s>","add_bos_token":true,"add_eos_token":true}`)
	write("generation_config.json", `{"eos_token_id":[2,0]}`)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if bos, ok := tok.BOS(); !ok || bos != 1 {
		t.Errorf("BOS = %d, %v, want 1", bos, ok)
	}
	if eos := tok.EOS(); !slices.Equal(eos, []int{2, 0}) {
		t.Errorf("EOS = %v, want [2 0]", eos)
	}
	got, _ := tok.Encode("a", true)
	if want := ids(t, tok, "<s>", "▁a", "</s>"); !slices.Equal(got, want) {
		t.Errorf("Encode with add_eos_token = %v, want %v", got, want)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty folder: no error")
	}
}

// A tokenizer whose ids reach past the model's embedding table is refused at
// load, naming both numbers: the model has no row for those ids (an added
// token past vocab_size would index out of range at the first prompt that
// holds it).
func TestLoadRefusesIDsBeyondVocabSize(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "tiny_fallback.json"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	n := base.VocabSize()
	var withAdded map[string]any
	if err := json.Unmarshal(data, &withAdded); err != nil {
		t.Fatal(err)
	}
	withAdded["added_tokens"] = append(withAdded["added_tokens"].([]any), map[string]any{
		"id": n + 5, "content": "<|extra|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
	added, _ := json.Marshal(withAdded)
	for _, tt := range []struct {
		name, config string
		tokenizer    []byte
		want         string // "" for success
	}{
		{"fits", fmt.Sprintf(`{"vocab_size": %d}`, n), data, ""},
		{"room to spare", fmt.Sprintf(`{"vocab_size": %d}`, n+100), data, ""},
		{"no vocab_size", `{"model_type": "llama"}`, data, ""},
		{"nested text_config", fmt.Sprintf(`{"text_config": {"vocab_size": %d}}`, n-1), data, fmt.Sprintf("ids up to %d", n-1)},
		{"one too many", fmt.Sprintf(`{"vocab_size": %d}`, n-1), data, fmt.Sprintf("ids up to %d (%d ids, added tokens included), but config.json's vocab_size is %d", n-1, n, n-1)},
		{"added token beyond", fmt.Sprintf(`{"vocab_size": %d}`, n), added, fmt.Sprintf(`ids up to %d (%d ids, added tokens included), but config.json's vocab_size is %d; the last is "<|extra|>"`, n+5, n+6, n)},
		{"config not JSON", `{"vocab_size": `, data, "config.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range map[string][]byte{"tokenizer.json": tt.tokenizer, "config.json": []byte(tt.config)} {
				if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			case tt.want != "" && tt.name != "config not JSON" && !errors.Is(err, ErrVocabMismatch):
				t.Fatalf("got %v, want it to match ErrVocabMismatch", err)
			}
		})
	}
}

// TestMergePathsAgree holds the two merge loops (scan for short words, heap
// for long ones) to the same result, by forcing each in turn, and likewise
// encoding sentencepiece text in ▁ chunks or as one word.
func TestMergePathsAgree(t *testing.T) {
	for _, name := range []string{"qwen3", "llama2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tok := fixtureTokenizer(t, name)
			texts := hardStrings(t)
			for _, c := range readGoldens(t, name) {
				texts = append(texts, c.Text)
			}
			texts = append(texts, strings.Repeat(strings.Join(texts, " "), 3))
			encodeAll := func() [][]int {
				tok.model.clearCache()
				var out [][]int
				for _, s := range texts {
					ids, err := tok.Encode(s, false)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, ids)
				}
				return out
			}
			defer func(n int, chunks bool) {
				smallWord, tok.model.metaspaceChunks = n, chunks
				tok.model.clearCache()
			}(smallWord, tok.model.metaspaceChunks)
			want := encodeAll()
			variants := map[string]func(){
				"scan only": func() { smallWord = 1 << 30 },
				"heap only": func() { smallWord = 0 },
				"one chunk": func() { smallWord = 12; tok.model.metaspaceChunks = false },
			}
			for vname, set := range variants {
				set()
				got := encodeAll()
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("%s: %+q: %v, want %v", vname, texts[i], got[i], want[i])
						break
					}
				}
			}
		})
	}
	if tok := fixtureTokenizer(t, "llama2"); !tok.model.metaspaceChunks {
		t.Error("llama2: metaspaceChunks off, want on (no token has ▁ after another character)")
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadTiny(t, "tiny_bytelevel.json")
	want, _ := tok.Encode("hello the hello", false)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				got, err := tok.Encode("hello the hello", false)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("concurrent Encode = %v, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestModelOptions(t *testing.T) {
	build := func(model map[string]any, extra map[string]any) *Tokenizer {
		t.Helper()
		model["type"] = "BPE"
		file := map[string]any{"model": model, "pre_tokenizer": map[string]any{"type": "WhitespaceSplit"}}
		for k, v := range extra {
			file[k] = v
		}
		data, _ := json.Marshal(file)
		tok, err := FromJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name  string
		tok   *Tokenizer
		text  string
		want  []int
		round string // expected Decode, if checked
	}{
		{"merges", build(map[string]any{"vocab": map[string]int{"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": [][]string{{"a", "b"}}}, nil), "abc", []int{3, 2}, ""},
		{"ignore_merges", build(map[string]any{"vocab": map[string]int{"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": [][]string{{"a", "b"}}, "ignore_merges": true}, nil), "abc", []int{4}, ""},
		{"unk unfused", build(map[string]any{"vocab": map[string]int{"<unk>": 0, "a": 1}, "merges": []string{}, "unk_token": "<unk>"}, nil), "axyz", []int{1, 0, 0, 0}, ""},
		{"unk fused", build(map[string]any{"vocab": map[string]int{"<unk>": 0, "a": 1}, "merges": []string{}, "unk_token": "<unk>", "fuse_unk": true}, nil), "axya", []int{1, 0, 1}, ""},
		{"no unk drops", build(map[string]any{"vocab": map[string]int{"a": 0}, "merges": []string{}}, nil), "xax", []int{0}, ""},
		{"end_of_word_suffix", build(map[string]any{
			"vocab":  map[string]int{"l": 0, "o": 1, "w": 2, "o</w>": 3, "w</w>": 4, "lo": 5, "low</w>": 6},
			"merges": []string{"l o", "lo w</w>"}, "end_of_word_suffix": "</w>"},
			map[string]any{"decoder": map[string]any{"type": "BPEDecoder", "suffix": "</w>"}}),
			"low lo", []int{6, 0, 3}, "low lo"},
		{"continuing_subword_prefix", build(map[string]any{
			"vocab":  map[string]int{"h": 0, "##i": 1, "##s": 2, "hi": 3, "his": 4},
			"merges": []string{"h ##i", "hi ##s"}, "continuing_subword_prefix": "##"}, nil),
			"his hi", []int{4, 3}, ""},
	}
	for _, tt := range tests {
		got, err := tt.tok.Encode(tt.text, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", tt.name, tt.text, got, tt.want)
		}
		if tt.round != "" {
			if dec := tt.tok.Decode(got, false); dec != tt.round {
				t.Errorf("%s: Decode = %q, want %q", tt.name, dec, tt.round)
			}
		}
	}
}
