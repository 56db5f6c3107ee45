package ttt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

// demoModel writes the bundled demo model to a folder and loads it on cpu.
func demoModel(t testing.TB) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	return inferencetest.Load(t, inferencetest.Demo(t))
}

// encode tokenizes a testdata file (or literal text) without special tokens.
func encode(t testing.TB, tok *tokenizer.Tokenizer, text string) []int {
	t.Helper()
	ids, err := tok.Encode(strings.TrimSpace(text), false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
