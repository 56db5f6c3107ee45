// Package inferencetest writes the tiny model that tests across the project
// load from disk: a random-weight llama (hidden 64, 2 layers, 4 query and 2
// key/value heads of 16) with the real byte-level BPE tokenizer of
// inference/tokenizer/testdata (vocabulary 302, EOS 301). It is fast to build
// on the cpu backend and needs no download. Training and app tests each had a
// copy of it; this is the one.
//
// It is for _test.go files only (deps_test.go checks that).
package inferencetest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu" // Dir builds the weights on cpu
	"github.com/inloop/inloop/resources"
)

// Config is the tiny model's config.json.
func Config() inference.Config {
	return inference.Config{
		ModelType: "llama", HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-5,
		RopeTheta: 10000, VocabSize: 302, TieWordEmbeddings: true, MaxPositionEmbeddings: 512,
		EOSTokenID: inference.TokenIDs{301},
	}
}

// An Option changes the model Dir writes.
type Option func(*options)

type options struct {
	cfg   inference.Config
	seed  uint64
	files map[string][]byte
}

// WithConfig edits the config before the weights are made, e.g. to add layers.
// Keep VocabSize at 302 unless the tokenizer is replaced too.
func WithConfig(edit func(*inference.Config)) Option {
	return func(o *options) { edit(&o.cfg) }
}

// WithSeed draws the random weights from seed instead of 1.
func WithSeed(seed uint64) Option { return func(o *options) { o.seed = seed } }

// WithFile adds (or replaces) a file of the model folder, e.g. a
// tokenizer_config.json with a chat template.
func WithFile(name string, data []byte) Option {
	return func(o *options) { o.files[name] = data }
}

// Dir writes the tiny model into a new folder under t.TempDir and returns it:
// config.json, model.safetensors and tokenizer.json. Without options it holds
// the same weights every time.
func Dir(t testing.TB, opts ...Option) string {
	t.Helper()
	o := options{cfg: Config(), seed: 1, files: map[string][]byte{"tokenizer.json": TokenizerJSON(t)}}
	for _, opt := range opts {
		opt(&o)
	}
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatalf("inferencetest: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "model")
	if err := inference.SaveModel(inference.NewRandom(o.cfg, o.seed, b), dir); err != nil {
		t.Fatalf("inferencetest: %v", err)
	}
	for name, data := range o.files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatalf("inferencetest: %v", err)
		}
	}
	return dir
}

// TokenizerJSON returns the tiny byte-level tokenizer.json.
func TokenizerJSON(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(tokenizerPath(t))
	if err != nil {
		t.Fatalf("inferencetest: %v", err)
	}
	return data
}

const tokenizerRel = "inference/tokenizer/testdata/tiny_bytelevel.json"

// tokenizerPath finds the tokenizer in the source tree: from the module root
// above the test's working folder (its package folder), or else from where
// this file was compiled.
func tokenizerPath(t testing.TB) string {
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p := filepath.Join(dir, filepath.FromSlash(tokenizerRel)); exists(p) {
					return p
				}
				break
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		if p := filepath.Join(filepath.Dir(file), "..", "tokenizer", "testdata", "tiny_bytelevel.json"); exists(p) {
			return p
		}
	}
	t.Fatalf("inferencetest: %s not found above the working folder or beside this package's source", tokenizerRel)
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Load loads the model folder dir on the cpu backend with its tokenizer.
func Load(t testing.TB, dir string) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := inference.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// Demo writes the bundled demo model into a new folder and returns it.
func Demo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.CopyFS(dir, resources.DemoFS()); err != nil {
		t.Fatal(err)
	}
	return dir
}
