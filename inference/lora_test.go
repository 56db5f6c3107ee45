package inference

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// An mlx-lm adapter loaded beside the frozen weights gives the same logits as the
// weights fused by hand: W' = W + scale·(A·B)ᵀ.
func TestLoadAdapterMatchesFusedWeights(t *testing.T) {
	b, _ := mx.Open("cpu")
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 3, b)
	dir := t.TempDir()
	const rank, scale = 4, 2.0
	tensors := map[string]*mx.Array{}
	fused := m.Params()
	for i, key := range []string{"model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"} {
		var lin *Linear
		m.Linears(func(p string, l *Linear) {
			if p == key {
				lin = l
			}
		})
		if lin == nil {
			t.Fatalf("no linear %s", key)
		}
		a := mx.MulScalar(mx.RandomNormal(uint64(10+i), lin.In, rank), 0.1)
		bb := mx.MulScalar(mx.RandomNormal(uint64(20+i), rank, lin.Out), 0.1)
		tensors[key+".lora_a"], tensors[key+".lora_b"] = a, bb
		fused[key+".weight"] = mx.Add(lin.Weight, mx.MulScalar(mx.Transpose(mx.Matmul(a, bb)), scale))
	}
	if err := mx.SaveSafetensors(filepath.Join(dir, "adapters.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	var ac AdapterConfig
	ac.FineTuneType, ac.NumLayers = "lora", 1
	ac.LoRAParameters.Rank, ac.LoRAParameters.Scale = rank, scale
	raw, _ := json.Marshal(ac)
	os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644)

	want, err := m.WithParams(fused)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAdapter(m, dir); err != nil {
		t.Fatal(err)
	}
	ids, _ := m.Tokens(tokenSeq(9, cfg.VocabSize, 5))
	got, exp := floats(t, m.Forward(ids, nil)), floats(t, want.Forward(ids, nil))
	for i := range got {
		if d := got[i] - exp[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("logit %d: adapter %v, fused %v", i, got[i], exp[i])
		}
	}

	// A tensor for a layer the model lacks is refused, naming it.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "adapter_config.json"), raw, 0o644)
	mx.SaveSafetensors(filepath.Join(bad, "adapters.safetensors"), map[string]*mx.Array{
		"model.layers.9.self_attn.q_proj.lora_a": mx.Zeros(cfg.HiddenSize, rank),
	}, nil)
	if _, err := LoadAdapter(NewRandom(cfg, 3, b), bad); err == nil || !strings.Contains(err.Error(), "layers.9") {
		t.Errorf("adapter for a missing layer: got %v", err)
	}
}
