package inference

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// saveTiny writes a tiny model, lets edit change its tensors, and returns the folder.
func saveTiny(t *testing.T, cfg Config, edit func(map[string]*mx.Array)) string {
	t.Helper()
	b := cpu(t)
	m := NewRandom(cfg, 11, b)
	dir := t.TempDir()
	if err := SaveModel(m, dir); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		p := m.Params()
		edit(p)
		if err := mx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadErrors(t *testing.T) {
	b := cpu(t)
	unknown := tinyConfig("llama")
	unknown.ModelType = "gemma3"
	dir := saveTiny(t, tinyConfig("llama"), nil)
	data, _ := unknown.JSON()
	os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	if _, err := Load(dir, b); !errors.Is(err, ErrUnknownArchitecture) || !strings.Contains(err.Error(), `"gemma3"`) {
		t.Errorf("unknown architecture: %v", err)
	}

	for _, c := range []struct {
		name string
		cfg  Config
		edit func(map[string]*mx.Array)
		is   error
		want string
	}{
		{"missing tensor", tinyConfig("llama"), func(p map[string]*mx.Array) { delete(p, "model.layers.1.mlp.up_proj.weight") },
			ErrMissingTensor, "model.layers.1.mlp.up_proj.weight"},
		{"qwen2 without biases", tinyConfig("llama"), nil, ErrMissingTensor, "model.layers.0.self_attn.q_proj.bias"},
		{"wrong shape", tinyConfig("qwen3"), func(p map[string]*mx.Array) {
			p["model.layers.0.self_attn.k_norm.weight"] = mx.Zeros(8)
		}, ErrTensorShape, "model.layers.0.self_attn.k_norm.weight has shape [8]"},
		{"untied without lm_head", func() Config { c := tinyConfig("llama"); c.TieWordEmbeddings = false; return c }(),
			func(p map[string]*mx.Array) { delete(p, "lm_head.weight") }, ErrMissingTensor, "lm_head.weight"},
		{"integer weight", tinyConfig("llama"), func(p map[string]*mx.Array) {
			p["model.norm.weight"] = mx.FromData(b, mx.Int32, make([]int32, 32), 32)
		}, ErrTensorShape, "model.norm.weight is int32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := saveTiny(t, c.cfg, c.edit)
			if c.name == "qwen2 without biases" {
				q := tinyConfig("qwen2")
				data, _ := q.JSON()
				os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
			}
			_, err := Load(dir, b)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %v naming %q", err, c.is, c.want)
			}
		})
	}
}

func TestLoadWarnsAboutExtraTensors(t *testing.T) {
	dir := saveTiny(t, tinyConfig("llama"), func(p map[string]*mx.Array) {
		p["model.layers.0.self_attn.rotary_emb.inv_freq"] = mx.Ones(8) // old checkpoints: ignored silently
		p["model.vision_tower.weight"] = mx.Ones(4)
		p["lm_head.weight"] = mx.Ones(97, 32) // a tied model's copy
	})
	m, err := Load(dir, cpu(t))
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(m.Warnings(), "\n")
	if !strings.Contains(w, "model.vision_tower.weight") || !strings.Contains(w, "lm_head.weight") || strings.Contains(w, "inv_freq") {
		t.Errorf("warnings = %q", w)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	b := cpu(t)
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		cfg := tinyConfig(arch)
		cfg.TieWordEmbeddings = arch != "llama"
		m := NewRandom(cfg, 12, b)
		dir := t.TempDir()
		if err := SaveModel(m, dir); err != nil {
			t.Fatal(err)
		}
		back, err := Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(back.Params()), len(m.Params()); got != want {
			t.Errorf("%s: %d params after reload, want %d", arch, got, want)
		}
		ids, _ := m.Tokens(tokenSeq(9, cfg.VocabSize, 1))
		if d := maxAbsDiff(floats(t, m.Forward(ids, nil)), floats(t, back.Forward(ids, nil))); d != 0 {
			t.Errorf("%s: reloaded logits differ by %g", arch, d)
		}
	}
}

// WithParams lets ValueAndGrad differentiate the loss through the model.
func TestGradientThroughModel(t *testing.T) {
	b := cpu(t)
	mx.SetDefault(b)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 13, b)
	names := []string{"model.layers.1.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight"}
	params := make([]*mx.Array, len(names))
	for i, n := range names {
		params[i] = m.Params()[n]
	}
	seq := tokenSeq(9, cfg.VocabSize, 2)
	ids, _ := m.Tokens(seq[:8])
	targets := mx.FromData(b, mx.Int32, []int32{int32(seq[1]), int32(seq[2]), int32(seq[3]), int32(seq[4]), int32(seq[5]), int32(seq[6]), int32(seq[7]), int32(seq[8])}, 1, 8)
	loss := func(ps []*mx.Array) []*mx.Array {
		sub := map[string]*mx.Array{}
		for i, n := range names {
			sub[n] = ps[i]
		}
		mm, err := m.WithParams(sub)
		if err != nil {
			return []*mx.Array{mx.Errorf("%v", err)}
		}
		return []*mx.Array{mx.Mean(mx.CrossEntropy(mm.Forward(ids, nil), targets), nil, false)}
	}
	_, grads, err := mx.ValueAndGrad(loss, params)
	if err != nil {
		t.Fatal(err)
	}
	// Check one coordinate of each gradient against a central difference.
	for i := range names {
		g := floats(t, grads[i])
		w := floats(t, params[i])
		const h = 1e-2
		at := func(delta float32) float64 {
			v := append([]float32(nil), w...)
			v[3] += delta
			ps := append([]*mx.Array(nil), params...)
			ps[i] = mx.FromData(b, mx.Float32, v, params[i].Shape()...)
			l, _ := loss(ps)[0].Item()
			return float64(l)
		}
		fd := (at(h) - at(-h)) / (2 * h)
		if diff := fd - float64(g[3]); diff*diff > 1e-6+1e-4*fd*fd {
			t.Errorf("%s: gradient %g, finite difference %g", names[i], g[3], fd)
		}
	}
	if _, err := m.WithParams(map[string]*mx.Array{"model.norm.weight": mx.Ones(3)}); !errors.Is(err, ErrTensorShape) {
		t.Errorf("WithParams with a wrong shape: %v", err)
	}
}

func TestWithParamsKeepsAdapters(t *testing.T) {
	b := cpu(t)
	m := NewRandom(tinyConfig("llama"), 14, b)
	const path = "model.layers.1.self_attn.q_proj"
	a := NewAdapter("test", map[string]LoRA{path: {A: mx.Zeros(32, 2), B: mx.Zeros(2, 64), Scale: 1}})
	v, err := m.PushAdapter(a)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.WithParams(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cp.Adapters(); len(got) != 1 || got[0] != a || cp.AdapterVersion() != v {
		t.Errorf("after WithParams: adapters %v at version %d, want [%p] at %d", got, cp.AdapterVersion(), a, v)
	}
	n := 0
	cp.Linears(func(p string, l *Linear) {
		if len(l.adapters) != 0 {
			n++
			if p != path {
				t.Errorf("adapter on %s", p)
			}
		}
	})
	if n != 1 {
		t.Errorf("%d adapted layers after WithParams, want 1", n)
	}
}
