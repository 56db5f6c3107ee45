package lora

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

func tinyConfig() inference.Config {
	return inference.Config{
		ModelType: "llama", HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 3,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-5,
		RopeTheta: 10000, VocabSize: 101, TieWordEmbeddings: true, MaxPositionEmbeddings: 512,
	}
}

func cpu(t *testing.T) mx.Backend {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	mx.SetDefault(b)
	return b
}

func logits(t *testing.T, m *inference.Model) []float32 {
	t.Helper()
	ids, err := m.Tokens([]int{1, 5, 9, 33, 70, 2, 8, 8, 41}, []int{3, 4, 5, 6, 7, 8, 9, 10, 11})
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Forward(ids, nil).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// perturb gives every lora_b random values so adapters change the output.
func perturb(t *testing.T, m *inference.Model, seed uint64) {
	t.Helper()
	ps := Params(m)
	for name, p := range ps {
		if filepath.Ext(name) == ".lora_b" {
			ps[name] = mx.MulScalar(mx.RandomNormal(seed, p.Shape()...), 0.01)
			seed++
		}
	}
	if err := SetParams(m, ps); err != nil {
		t.Fatal(err)
	}
}

func TestApplyTargets(t *testing.T) {
	b := cpu(t)
	m := inference.NewRandom(tinyConfig(), 1, b)
	base := logits(t, m)
	paths, err := Apply(m, Config{NumLayers: 2, Rank: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// 7 linears per llama block (q, k, v, o, gate, up, down), last 2 blocks.
	if len(paths) != 14 || paths[0] != "model.layers.1.self_attn.q_proj" {
		t.Fatalf("paths %v", paths)
	}
	if d := maxDiff(base, logits(t, m)); d != 0 {
		t.Errorf("fresh adapters (lora_b = 0) changed logits by %g", d)
	}
	ps := Params(m)
	if len(ps) != 28 {
		t.Fatalf("%d params", len(ps))
	}
	a, _ := ps["model.layers.2.mlp.down_proj.lora_a"].Float32s()
	bound := float32(1 / math.Sqrt(128))
	for _, v := range a {
		if v < -bound || v > bound {
			t.Fatalf("lora_a value %g outside ±%g", v, bound)
		}
	}
	if s := ps["model.layers.2.mlp.down_proj.lora_a"].Shape(); !slices.Equal(s, []int{128, 4}) {
		t.Errorf("lora_a shape %v", s)
	}
	// Same seed, same init.
	m2 := inference.NewRandom(tinyConfig(), 1, b)
	if _, err := Apply(m2, Config{NumLayers: 2, Rank: 4, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	a2, _ := Params(m2)["model.layers.2.mlp.down_proj.lora_a"].Float32s()
	if !slices.Equal(a, a2) {
		t.Error("same seed gave different lora_a")
	}
	paths, err = Apply(inference.NewRandom(tinyConfig(), 1, b), Config{NumLayers: -1, Keys: []string{"self_attn.q_proj", "self_attn.v_proj"}})
	if err != nil || len(paths) != 6 {
		t.Errorf("keys: %v, %v", paths, err)
	}
	if _, err := Apply(m2, Config{Keys: []string{"self_attn.nope"}}); err == nil {
		t.Error("an unknown key was accepted")
	}
	if err := SetParams(m2, map[string]*mx.Array{"model.layers.0.self_attn.q_proj.lora_a": mx.Zeros(64, 4)}); err == nil {
		t.Error("SetParams accepted a layer without an adapter")
	}
	if err := SetParams(m2, map[string]*mx.Array{"model.layers.2.self_attn.q_proj.lora_a": mx.Zeros(64, 5)}); err == nil {
		t.Error("SetParams accepted a wrong shape")
	}
}

func TestSaveLoadAdapterRoundTrip(t *testing.T) {
	b := cpu(t)
	m := inference.NewRandom(tinyConfig(), 1, b)
	cfg := Config{NumLayers: 2, Rank: 4, Scale: 10, Dropout: 0.05, Seed: 1}
	if _, err := Apply(m, cfg); err != nil {
		t.Fatal(err)
	}
	perturb(t, m, 7)
	want := logits(t, m)
	dir := t.TempDir()
	if err := Save(dir, m, cfg); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	lp, _ := js["lora_parameters"].(map[string]any)
	if js["fine_tune_type"] != "lora" || js["num_layers"] != 2.0 || lp["rank"] != 4.0 || lp["scale"] != 10.0 || lp["dropout"] != 0.05 || len(lp["keys"].([]any)) != 7 {
		t.Errorf("adapter_config.json: %s", raw)
	}
	m2 := inference.NewRandom(tinyConfig(), 1, b)
	ac, err := inference.LoadAdapter(m2, dir)
	if err != nil {
		t.Fatal(err)
	}
	if ac.LoRAParameters.Rank != 4 {
		t.Errorf("rank %d", ac.LoRAParameters.Rank)
	}
	if d := maxDiff(want, logits(t, m2)); d != 0 {
		t.Errorf("reloaded adapter differs by %g", d)
	}
}

func TestFuse(t *testing.T) {
	b := cpu(t)
	for _, tc := range []struct {
		name  string
		quant bool
		deq   bool
		tol   float64
	}{{"dense", false, false, 1e-4}, {"q8", true, false, 0}, {"q8-dequantize", true, true, 1e-4}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			if tc.quant {
				cfg.Quantization = &inference.Quantization{QuantParams: inference.QuantParams{GroupSize: 32, Bits: 8}}
			}
			m := inference.NewRandom(cfg, 1, b)
			base := logits(t, m)
			if _, err := Apply(m, Config{NumLayers: -1, Rank: 4}); err != nil {
				t.Fatal(err)
			}
			perturb(t, m, 11)
			adapted := logits(t, m)
			change := maxDiff(base, adapted)
			if change < 1e-2 {
				t.Fatalf("the adapter hardly changes the logits (%g)", change)
			}
			paths, err := Fuse(m, FuseOptions{Dequantize: tc.deq})
			if err != nil || len(paths) != 21 {
				t.Fatalf("fuse: %d paths, %v", len(paths), err)
			}
			if len(Params(m)) != 0 {
				t.Error("adapters left after fusing")
			}
			fused := logits(t, m)
			d := maxDiff(adapted, fused)
			t.Logf("adapter changes logits by %.4g; fused differs from adapted by %.4g", change, d)
			tol := tc.tol
			if tol == 0 { // re-quantized: the rounding of 8 bits, well below the adapter's effect
				tol = change / 5
			}
			if d > tol {
				t.Errorf("fused logits differ from adapted ones by %g (tolerance %g)", d, tol)
			}
			m.Linears(func(path string, l *inference.Linear) {
				if tc.quant && (l.Scales == nil) != tc.deq {
					t.Fatalf("%s: quantized=%v after fuse", path, l.Scales != nil)
				}
			})
		})
	}
}

func TestDropout(t *testing.T) {
	b := cpu(t)
	m := inference.NewRandom(tinyConfig(), 1, b)
	if _, err := Apply(m, Config{NumLayers: 1, Rank: 4}); err != nil {
		t.Fatal(err)
	}
	perturb(t, m, 3)
	clean := logits(t, m)
	SetDropout(m, 0.5, 9)
	d1 := logits(t, m)
	d2 := logits(t, m)
	if maxDiff(clean, d1) == 0 {
		t.Error("dropout changed nothing")
	}
	if maxDiff(d1, d2) != 0 {
		t.Error("the same dropout seed gave different masks")
	}
	SetDropout(m, 0, 0)
	if maxDiff(clean, logits(t, m)) != 0 {
		t.Error("removing dropout did not restore the output")
	}
}

// Apply stacks: a second adapter goes over the first, which keeps its weights;
// Params and SetParams reach the top one; Fuse folds both.
func TestApplyStacks(t *testing.T) {
	b := cpu(t)
	m := inference.NewRandom(tinyConfig(), 1, b)
	base := logits(t, m)
	if _, err := Apply(m, Config{NumLayers: 2, Rank: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	perturb(t, m, 5)
	user := logits(t, m)
	userParams := Params(m)
	if _, err := Apply(m, Config{NumLayers: -1, Rank: 2, Scale: 4, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	if got := logits(t, m); maxDiff(got, user) != 0 {
		t.Errorf("a fresh adapter on top changed the logits by %g", maxDiff(got, user))
	}
	if n := len(m.Adapters()); n != 2 {
		t.Fatalf("%d adapters on the stack, want 2", n)
	}
	if ps := Params(m); len(ps) != 42 {
		t.Errorf("Params: %d arrays, want the top adapter's 42", len(ps))
	}
	perturb(t, m, 9)
	both := logits(t, m)
	if maxDiff(both, user) < 1e-3 {
		t.Fatal("the top adapter hardly changes the logits")
	}
	top, _, err := m.PopAdapter()
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range Params(m) {
		if a != userParams[name] {
			t.Fatalf("the user's %s changed under the pushed adapter", name)
		}
	}
	if got := logits(t, m); maxDiff(got, user) != 0 {
		t.Errorf("after pop the logits differ by %g", maxDiff(got, user))
	}
	m.PushAdapter(top)
	paths, err := Fuse(m, FuseOptions{})
	if err != nil || len(paths) != 21 {
		t.Fatalf("fuse: %d paths, %v", len(paths), err)
	}
	if d := maxDiff(both, logits(t, m)); d > 1e-4 || len(m.Adapters()) != 0 {
		t.Errorf("fused stack differs by %g (%d adapters left)", d, len(m.Adapters()))
	}
	if maxDiff(base, both) < 1e-3 {
		t.Error("the adapters did nothing")
	}
}
