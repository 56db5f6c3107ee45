package inference_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
)

// FuzzModelFolder fuzzes the text files of a whole model folder — config.json,
// tokenizer.json and tokenizer_config.json (special tokens and the chat
// template) — beside the tiny model's real weights, and runs what opening a
// model runs: the config, the tokenizer (checked against vocab_size), the chat
// template, the weights, and a two-token reply to a short chat. Every input
// must end in a clean error or a reply, within the budget: no panic, no hang,
// well under 10 s (the template's own budget is a second).
func FuzzModelFolder(f *testing.F) {
	base := inferencetest.Dir(f)
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(base, name))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	weights := read("model.safetensors")
	config, tokJSON := read("config.json"), read("tokenizer.json")
	f.Add(config, tokJSON, []byte(`{"eos_token": "<|endoftext|>"}`))
	seeds, _ := filepath.Glob(filepath.Join("chat", "testdata", "models", "*", "tokenizer_config.json"))
	for _, s := range seeds {
		if tc, err := os.ReadFile(s); err == nil {
			f.Add(config, tokJSON, tc)
		}
	}
	f.Add(config, tokJSON, []byte(`{"chat_template": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}`))
	f.Add(config, tokJSON, []byte(`{"chat_template": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}`))
	f.Add([]byte(`{"model_type": "llama", "vocab_size": 10}`), tokJSON, []byte(`{}`))

	b, err := mx.Open("cpu")
	if err != nil {
		f.Fatal(err)
	}
	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "hi"}}
	f.Fuzz(func(t *testing.T, config, tokJSON, tokConfig []byte) {
		dir := t.TempDir()
		for name, data := range map[string][]byte{"config.json": config, "tokenizer.json": tokJSON,
			"tokenizer_config.json": tokConfig, "model.safetensors": weights} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		defer func() {
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("opening the folder took %v", el)
			}
		}()
		if _, err := inference.ReadConfig(dir); err != nil {
			return
		}
		if _, err := tokenizer.Load(dir); err != nil {
			return
		}
		if _, err := chat.LoadTemplate(dir); err != nil {
			return
		}
		m, err := inference.Load(dir, b)
		if err != nil {
			return
		}
		rep, err := inference.LoadReplier(m, dir)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rep.Reply(ctx, inference.NewSession(m), msgs, inference.ReplyOptions{MaxTokens: 2}, nil)
	})
}
