package inference

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// Generation with a loaded adapter — the path `inloop generate --adapter` takes:
// prefill, then decode steps over the cache — gives at every step the logits of
// the dense weights W + scale·(A·B)ᵀ computed by hand, with the scale read from
// adapter_config.json. (An adapter whose B is zero shows nothing of the scale.)
func TestGenerateWithAdapterMatchesDenseWeights(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	const seed, rank, scale = 7, 4, 20.0
	m := NewRandom(cfg, seed, b)
	dir := t.TempDir()
	tensors := map[string]*mx.Array{}
	fused := m.Params()
	i := uint64(0)
	m.Linears(func(path string, l *Linear) {
		if !strings.HasPrefix(path, "model.layers.") || strings.HasSuffix(path, "gate_proj") {
			return
		}
		a := mx.MulScalar(mx.RandomNormal(100+i, l.In, rank), 0.05)
		bb := mx.MulScalar(mx.RandomNormal(200+i, rank, l.Out), 0.05)
		i++
		tensors[path+".lora_a"], tensors[path+".lora_b"] = a, bb
		fused[path+".weight"] = mx.Add(l.Weight, mx.MulScalar(mx.Transpose(mx.Matmul(a, bb)), scale))
	})
	if err := mx.SaveSafetensors(filepath.Join(dir, "adapters.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	var ac AdapterConfig
	ac.FineTuneType, ac.NumLayers = "lora", cfg.NumHiddenLayers
	ac.LoRAParameters.Rank, ac.LoRAParameters.Scale = rank, scale
	raw, _ := json.Marshal(ac)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dense, err := NewRandom(cfg, seed, b).WithParams(fused)
	if err != nil {
		t.Fatal(err)
	}
	base := NewRandom(cfg, seed, b)
	if _, err := LoadAdapter(m, dir); err != nil {
		t.Fatal(err)
	}

	prompt := tokenSeq(6, cfg.VocabSize, 11)
	var got []int
	if _, err := Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 10},
		func(tok int) bool { got = append(got, tok); return false }); err != nil {
		t.Fatal(err)
	}
	// The same steps by hand on a session of the adapted model, each against a
	// full forward of the dense weights without a cache.
	sess := NewSession(m)
	logits, _, err := sess.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	seq := slices.Clone(prompt)
	var moved float64
	for step, tok := range got {
		ids, _ := m.Tokens(seq)
		want := floats(t, dense.ForwardLast(ids, nil))
		have := floats(t, logits)
		if d := maxAbsDiff(have, want); d > 1e-4 {
			t.Fatalf("step %d: logits differ from the dense weights' by %g", step, d)
		}
		if w := argmax(want); tok != w {
			t.Fatalf("step %d: generated %d, the dense weights give %d", step, tok, w)
		}
		moved = max(moved, maxAbsDiff(want, floats(t, base.ForwardLast(ids, nil))))
		seq = append(seq, tok)
		if logits, err = sess.Append([]int{tok}); err != nil {
			t.Fatal(err)
		}
	}
	if moved < 0.1 {
		t.Fatalf("the adapter moves the logits by only %g: the test cannot see its scale", moved)
	}
}
