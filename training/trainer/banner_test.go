package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// The banner's share of trainable parameters is mlx-lm's: over a 4-bit base it
// is taken of the dense parameter count (get_total_parameters counts a packed
// weight as the values it holds), not of words, scales and biases; the bytes the
// base holds are shown apart.
func TestBannerCountsAsMlxLM(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	q := filepath.Join(dir, "q4")
	if _, err := inference.QuantizeModel(model, q, 4, 32); err != nil {
		t.Fatal(err)
	}
	tok, _ := os.ReadFile(filepath.Join(model, "tokenizer.json"))
	os.WriteFile(filepath.Join(q, "tokenizer.json"), tok, 0o644)
	b, _ := mx.Open("cpu")
	dense, err := inference.Load(model, b)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, a := range dense.Params() {
		total += int64(a.Size())
	}
	var trainable int64
	dense.Linears(func(_ string, l *inference.Linear) { trainable += int64(4 * (l.In + l.Out)) }) // rank 4, every layer
	cfg := baseConfig(q, data, filepath.Join(dir, "run"))
	cfg.Iters, cfg.SaveEvery, cfg.StepsPerEval, cfg.TestBatches = 1, -1, -1, 1
	_, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d trainable parameters, %.3f%% (%.3fM/%.3fM)", trainable, 100*float64(trainable)/float64(total), float64(trainable)/1e6, float64(total)/1e6)
	var banner string
	for _, ev := range evs {
		if ev.Kind == EventInfo && strings.HasPrefix(ev.Message, "LoRA rank") {
			banner = ev.Message
		}
	}
	if !strings.Contains(banner, want) || !strings.Contains(banner, "QLoRA") || !strings.Contains(banner, "base weights") {
		t.Errorf("banner %q\nwant it to contain %q, QLoRA and the base's bytes", banner, want)
	}
}

// --dtype bfloat16 trains over bfloat16 base weights (float32 adapters) and says so.
func TestTrainBFloat16(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(tinyModelDir(t, dir), dataDir(t, dir), filepath.Join(dir, "run"))
	cfg.Iters, cfg.SaveEvery, cfg.StepsPerEval, cfg.DType = 20, -1, -1, "bfloat16"
	_, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var first, last float64
	said := false
	for _, ev := range evs {
		if ev.Kind == EventTrain {
			if ev.Step == 1 {
				first = ev.Loss
			}
			last = ev.Loss
		}
		said = said || (ev.Kind == EventInfo && strings.Contains(ev.Message, "in bfloat16"))
	}
	if !said {
		t.Error("the banner does not say the base is bfloat16")
	}
	if !(last < first/2) {
		t.Errorf("bfloat16 loss did not fall: %.3f → %.3f", first, last)
	}
	cfg.DType = "fp8"
	if _, _, err := collect(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "fp8") {
		t.Errorf("--dtype fp8: %v", err)
	}
}
