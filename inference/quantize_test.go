package inference

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

func TestQuantizeModel(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 96, 32 // down_proj's input (96) is not a multiple of 64
	dense := NewRandom(cfg, 31, b)
	src := t.TempDir()
	if err := SaveModel(dense, src); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{"model":{}}`), 0o644)
	os.WriteFile(filepath.Join(src, "generation_config.json"), []byte(`{}`), 0o644)
	ids, _ := dense.Tokens(tokenSeq(16, cfg.VocabSize, 2), tokenSeq(16, cfg.VocabSize, 3))
	want := floats(t, dense.Forward(ids, nil))
	scale := maxAbs(want)

	// Relative error bounds (max |Δ| / max |logit|) for uniform random weights; measured
	// 0.003 (8 bits) and 0.056 (4 bits) here; the bounds leave room.
	for _, c := range []struct {
		bits int
		tol  float64
	}{{8, 0.01}, {4, 0.15}} {
		dst := filepath.Join(t.TempDir(), "q")
		rep, err := QuantizeModel(src, dst, c.bits, 64)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(rep.Skipped, "model.layers.0.mlp.down_proj") || slices.Contains(rep.Quantized, "model.layers.0.mlp.down_proj") ||
			!slices.Contains(rep.Quantized, "model.embed_tokens") || !slices.Contains(rep.Quantized, "model.layers.1.self_attn.o_proj") {
			t.Errorf("%d bits: quantized %v, skipped %v", c.bits, rep.Quantized, rep.Skipped)
		}
		if rep.BytesAfter >= rep.BytesBefore || rep.Shards != 1 {
			t.Errorf("%d bits: %d bytes before, %d after, %d shards", c.bits, rep.BytesBefore, rep.BytesAfter, rep.Shards)
		}
		for _, f := range []string{"tokenizer.json", "generation_config.json", "model.safetensors"} {
			if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
				t.Errorf("%s missing: %v", f, err)
			}
		}
		var raw map[string]any
		data, _ := os.ReadFile(filepath.Join(dst, "config.json"))
		json.Unmarshal(data, &raw)
		q, _ := raw["quantization"].(map[string]any)
		if q["bits"] != float64(c.bits) || q["group_size"] != 64.0 || q["mode"] != "affine" || raw["quantization_config"] == nil || raw["head_dim"] != 32.0 {
			t.Errorf("config.json: %s", data)
		}

		m, err := Load(dst, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Warnings()) > 0 {
			t.Errorf("warnings: %v", m.Warnings())
		}
		if !m.Embed.quantized() || m.layers[0].(*qwen3Block).MLP.Down.quantized() {
			t.Errorf("quantized modules not as planned")
		}
		got := floats(t, m.Forward(ids, nil))
		rel := maxAbsDiff(got, want) / scale
		t.Logf("%d bits, group 64: max |Δ logits| / max |logit| = %.3g; %d → %d bytes", c.bits, rel, rep.BytesBefore, rep.BytesAfter)
		if rel > c.tol {
			t.Errorf("%d bits: relative logit error %g, want ≤ %g", c.bits, rel, c.tol)
		}

		// In-memory quantization (NewRandom) writes the same words as QuantizeModel.
		qcfg := cfg
		qcfg.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: c.bits}}
		mem := NewRandom(qcfg, 31, b)
		if d := maxAbsDiff(floats(t, mem.Forward(ids, nil)), got); d != 0 {
			t.Errorf("%d bits: NewRandom's quantization and QuantizeModel's differ by %g", c.bits, d)
		}

		if _, err := QuantizeModel(src, dst, c.bits, 64); err == nil || !strings.Contains(err.Error(), "exists") {
			t.Errorf("existing destination: %v", err)
		}
		if _, err := QuantizeModel(dst, dst+"2", 4, 64); err == nil || !strings.Contains(err.Error(), "already quantized") {
			t.Errorf("quantized source: %v", err)
		}
	}
	if _, err := QuantizeModel(src, filepath.Join(t.TempDir(), "x"), 7, 64); err == nil {
		t.Error("7 bits accepted")
	}
}

// A bf16 checkpoint keeps bf16 scales and biases (as mlx-lm writes them), and a big
// model is split into shards with an index that Load follows.
func TestQuantizeBF16Sharded(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	cfg.TieWordEmbeddings = false
	m := NewRandom(cfg, 32, b)
	m.slots(func(_ string, slot **mx.Array) { *slot = mx.AsType(*slot, mx.BFloat16) })
	src := t.TempDir()
	if err := SaveModel(m, src); err != nil {
		t.Fatal(err)
	}
	defer func(n int64) { maxShardBytes = n }(maxShardBytes)
	maxShardBytes = 8 << 10
	dst := filepath.Join(t.TempDir(), "q4")
	rep, err := QuantizeModel(src, dst, 4, 32)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Shards < 2 {
		t.Fatalf("%d shards", rep.Shards)
	}
	set, err := safetensors.OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := set.Info("lm_head.scales")
	set.Close()
	if info.DType != safetensors.DTypeBF16 {
		t.Errorf("lm_head.scales is %s, want BF16", info.DType)
	}
	q, err := Load(dst, b)
	if err != nil {
		t.Fatal(err)
	}
	if q.LMHead == nil || !q.LMHead.quantized() {
		t.Error("untied lm_head not quantized")
	}
	ids, _ := m.Tokens(tokenSeq(10, cfg.VocabSize, 1))
	want := floats(t, m.Forward(ids, nil))
	if rel := maxAbsDiff(floats(t, q.Forward(ids, nil)), want) / maxAbs(want); rel > 0.15 {
		t.Errorf("relative logit error %g", rel)
	}
}
