package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTrainCommand(t *testing.T) {
	dir := tinyModelDir(t)
	data := filepath.Join(t.TempDir(), "data.jsonl")
	os.WriteFile(data, []byte(`{"text": "the cat sat on the mat"}
{"text": "a dog ran in the park"}
{"text": "hello world, hello again"}
`), 0o644)
	adapter := filepath.Join(t.TempDir(), "adapter")
	var out, errb bytes.Buffer
	args := []string{"train", "--model", dir, "--data", data, "--adapter-path", adapter, "--backend", "cpu",
		"--iters", "6", "--batch-size", "2", "--learning-rate", "1e-3", "--num-layers", "1", "--rank", "2",
		"--steps-per-report", "3", "--save-every", "3", "--seed", "1"}
	if code := Main(args, &out, &errb); code != 0 {
		t.Fatalf("train exited %d: %s", code, errb.String())
	}
	t.Logf("%s%s", out.String(), errb.String())
	for _, want := range []string{"Iter 3: Train loss", "Iter 6: Saved checkpoint", "memory estimate", "adapter saved to"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"adapters.safetensors", "adapter_config.json", "checkpoints/step-000003/state.json"} {
		if _, err := os.Stat(filepath.Join(adapter, f)); err != nil {
			t.Error(err)
		}
	}
	// The trained adapter drives generation, and a resume at the end is a no-op.
	out.Reset()
	if code := Main([]string{"generate", "--model", dir, "--backend", "cpu", "--adapter", adapter, "--prompt", "the cat", "--max-tokens", "4", "--temp", "0"}, &out, &errb); code != 0 {
		t.Fatalf("generate with the trained adapter exited %d: %s", code, errb.String())
	}
	out.Reset()
	if code := Main(append(args, "--resume"), &out, &errb); code != 0 || !strings.Contains(out.String(), "resumed from") {
		t.Fatalf("resume exited %d:\n%s\n%s", code, out.String(), errb.String())
	}
	// Fused, the model generates what the model with the adapter does.
	greedy := func(extra ...string) string {
		t.Helper()
		var o, e bytes.Buffer
		if code := Main(append([]string{"generate", "--backend", "cpu", "--prompt", "the cat", "--max-tokens", "8", "--temp", "0", "--raw", "--stats=false"}, extra...), &o, &e); code != 0 {
			t.Fatalf("generate %v exited %d: %s", extra, code, e.String())
		}
		return o.String()
	}
	fused := filepath.Join(t.TempDir(), "fused")
	if code := Main([]string{"fuse", "--model", dir, "--adapter-path", adapter, "--save-path", fused, "--backend", "cpu"}, &out, &errb); code != 0 {
		t.Fatalf("fuse exited %d: %s", code, errb.String())
	}
	if a, f := greedy("--model", dir, "--adapter", adapter), greedy("--model", fused); a != f {
		t.Errorf("fused model generates %q, the adapter %q", f, a)
	}
	// A 4-bit base fused with --dequantize loads (its fused layers marked dense).
	q4 := filepath.Join(t.TempDir(), "q4")
	if code := Main([]string{"quantize", "--model", dir, "--out", q4, "--group-size", "32", "--backend", "cpu"}, &out, &errb); code != 0 {
		t.Fatalf("quantize exited %d: %s", code, errb.String())
	}
	fusedQ := filepath.Join(t.TempDir(), "fusedq")
	if code := Main([]string{"fuse", "--model", q4, "--adapter-path", adapter, "--save-path", fusedQ, "--dequantize", "--backend", "cpu"}, &out, &errb); code != 0 {
		t.Fatalf("fuse --dequantize exited %d: %s", code, errb.String())
	}
	if a, f := greedy("--model", q4, "--adapter", adapter), greedy("--model", fusedQ); a != f {
		t.Errorf("dequantized fused model generates %q, the 4-bit model with the adapter %q", f, a)
	}
	if code := Main([]string{"train", "--model", dir}, &out, &errb); code == 0 {
		t.Error("train without --data succeeded")
	}
}
