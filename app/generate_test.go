package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
)

// tinyModelDir writes a small random-weight llama with a real byte-level BPE
// tokenizer, so the commands run end to end with no download.
func tinyModelDir(t *testing.T) string { return inferencetest.Dir(t) }

func TestGenerateCommand(t *testing.T) {
	dir := tinyModelDir(t)
	run := func(extra ...string) (string, string) {
		var out, errb bytes.Buffer
		args := append([]string{"generate", "--model", dir, "--backend", "cpu", "--prompt", "hello world", "--max-tokens", "12"}, extra...)
		if code := Main(args, &out, &errb); code != 0 {
			t.Fatalf("generate %v exited %d: %s", extra, code, errb.String())
		}
		return out.String(), errb.String()
	}
	a, stats := run("--temp", "0")
	b, _ := run("--temp", "0")
	if a != b {
		t.Errorf("greedy generation differs between runs: %q vs %q", a, b)
	}
	if !strings.Contains(stats, "prompt tokens") || !strings.Contains(stats, "decode") {
		t.Errorf("no stats line: %q", stats)
	}
	if !strings.Contains(stats, "no chat template") {
		t.Errorf("missing the ChatML fallback warning: %q", stats)
	}
	c, _ := run("--temp", "1", "--seed", "7", "--raw")
	d, _ := run("--temp", "1", "--seed", "7", "--raw")
	if c != d {
		t.Errorf("same seed, different text: %q vs %q", c, d)
	}
	// An adapter whose B is zero changes nothing: the same greedy text.
	adapter := t.TempDir()
	lb := mx.Zeros(4, 64)
	la := mx.RandomNormal(1, 64, 4)
	if err := mx.SaveSafetensors(filepath.Join(adapter, "adapters.safetensors"), map[string]*mx.Array{
		"model.layers.0.self_attn.q_proj.lora_a": la, "model.layers.0.self_attn.q_proj.lora_b": lb,
	}, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(adapter, "adapter_config.json"), []byte(`{"fine_tune_type":"lora","num_layers":2,"lora_parameters":{"rank":4,"scale":20.0,"dropout":0.0}}`), 0o644)
	if e, _ := run("--temp", "0", "--adapter", adapter); e != a {
		t.Errorf("a zero adapter changed the text: %q vs %q", e, a)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"generate", "--model", dir, "--prompt", "x", "--adapter", t.TempDir()}, &out, &errb); code == 0 {
		t.Errorf("an empty adapter folder was accepted")
	}
	if code := Main([]string{"generate", "--model", dir, "--prompt", "x", "--temp", "-1"}, &out, &errb); code == 0 {
		t.Errorf("a negative temperature was accepted")
	}
	// A negative --max-tokens is refused before anything runs: one message, no
	// stats line of a reply that never started.
	out.Reset()
	errb.Reset()
	if code := Main([]string{"generate", "--model", dir, "--prompt", "x", "--max-tokens", "-1"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "--max-tokens -1") || strings.Contains(errb.String(), "prompt tokens") {
		t.Errorf("--max-tokens -1: exit %d, %q", code, errb.String())
	}
	if code := Main([]string{"generate", "--model", filepath.Join(dir, "nope"), "--prompt", "x"}, &out, &errb); code == 0 {
		t.Errorf("a missing model folder was accepted")
	}
}

func TestQuantizeCommand(t *testing.T) {
	dir := tinyModelDir(t)
	out := filepath.Join(t.TempDir(), "q8")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"quantize", "--model", dir, "--out", out, "--bits", "8", "--group-size", "32", "--backend", "cpu"}, &stdout, &stderr); code != 0 {
		t.Fatalf("quantize exited %d: %s", code, stderr.String())
	}
	for _, want := range []string{"size:", "perplexity:", "smaller"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
	cfg, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil || !strings.Contains(string(cfg), `"quantization"`) {
		t.Errorf("quantized config.json: %v %s", err, cfg)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Errorf("tokenizer not copied: %v", err)
	}
	if code := Main([]string{"quantize", "--model", dir, "--out", out}, &stdout, &stderr); code == 0 {
		t.Errorf("quantize over an existing folder succeeded")
	}
	// The quantized folder generates too.
	var g, ge bytes.Buffer
	if code := Main([]string{"generate", "--model", out, "--backend", "cpu", "--prompt", "hi", "--max-tokens", "4"}, &g, &ge); code != 0 {
		t.Errorf("generate on the quantized model exited %d: %s", code, ge.String())
	}
}
