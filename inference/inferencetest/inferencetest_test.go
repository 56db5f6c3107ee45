package inferencetest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
)

func TestDirLoads(t *testing.T) {
	dir := inferencetest.Dir(t)
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := inference.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Config().NumHiddenLayers, inferencetest.Config().NumHiddenLayers; got != want {
		t.Errorf("got %d layers, want %d", got, want)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.VocabSize(), inferencetest.Config().VocabSize; got != want {
		t.Errorf("tokenizer vocabulary %d, model vocabulary %d", got, want)
	}
}

func TestDirOptions(t *testing.T) {
	tmpl := []byte(`{"chat_template": "{{ messages[0].content }}"}`)
	dir := inferencetest.Dir(t,
		inferencetest.WithConfig(func(c *inference.Config) { c.NumHiddenLayers = 3 }),
		inferencetest.WithSeed(7),
		inferencetest.WithFile("tokenizer_config.json", tmpl))
	cfg, err := inference.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumHiddenLayers != 3 {
		t.Errorf("got %d layers, want 3", cfg.NumHiddenLayers)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err != nil || string(got) != string(tmpl) {
		t.Errorf("tokenizer_config.json: got %q, %v", got, err)
	}
}
