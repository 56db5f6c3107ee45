package inference

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Folders shaped like what each of mlx-lm's quantization recipes writes (mlx-lm
// 0.31.3: convert.py's mixed_quant_predicate_builder, utils.quantize_model,
// quant/dynamic_quant.py, quant/awq.py, quant/gptq.py, a model's own
// quant_predicate). Each config.json "quantization" block below is built the way
// that code builds it; the tensors are quantized here with the per-module
// settings the block means to mlx-lm, and the folder must load with exactly those
// settings and compute what the in-memory model computes.

// mixedConfig is a tiny llama whose sizes every recipe can quantize with groups of
// 64 (hidden 64, intermediate 128) and whose 4 layers put mixed_*'s "more bits"
// rule on two of them.
func mixedConfig() Config {
	c := tinyConfig("llama")
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 64, 128, 4
	c.TieWordEmbeddings = false
	return c
}

// quantModules lists the quantizable module paths of a config, in load order.
func quantModules(t *testing.T, cfg Config) []string {
	t.Helper()
	m := NewRandom(cfg, 1, cpu(t))
	var paths []string
	m.forEachModule(func(path string, _ any) error {
		paths = append(paths, path)
		return nil
	})
	return paths
}

// mixedPredicate is convert.py's mixed_quant_predicate: v_proj and down_proj of the
// first and last eighth of the layers and of every third one between get high
// bits, lm_head too, everything else low; group_size is whatever --q-group-size
// was (nil when not given).
func mixedPredicate(layers, low, high int, group any) func(path string) map[string]any {
	return func(path string) map[string]any {
		index := 0
		if parts := strings.Split(path, "."); len(parts) > 2 {
			fmt.Sscan(parts[2], &index) // model.layers.N...
		}
		more := index < layers/8 || index >= 7*layers/8 || (index-layers/8)%3 == 2
		bits := low
		if ((strings.Contains(path, "v_proj") || strings.Contains(path, "down_proj")) && more) || strings.Contains(path, "lm_head") {
			bits = high
		}
		return map[string]any{"group_size": group, "bits": bits, "mode": "affine"}
	}
}

// predicateCase is one recipe: the config.json block it writes and, for every
// module, the quantization mlx-lm gives it when loading (nil: left dense).
type predicateCase struct {
	name  string
	block map[string]any
	want  map[string]*QuantParams
}

func predicateCases(t *testing.T) []predicateCase {
	cfg := mixedConfig()
	paths := quantModules(t, cfg)
	var cases []predicateCase

	// mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6 without --q-group-size: the top
	// level gets mlx-lm's defaults (64, 4), every module a null group size.
	for _, r := range []struct{ low, high int }{{2, 6}, {3, 4}, {3, 6}, {4, 6}} {
		pred := mixedPredicate(cfg.NumHiddenLayers, r.low, r.high, nil)
		c := predicateCase{name: fmt.Sprintf("mixed_%d_%d", r.low, r.high),
			block: map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}, want: map[string]*QuantParams{}}
		for _, p := range paths {
			d := pred(p)
			c.block[p] = d
			c.want[p] = &QuantParams{GroupSize: 64, Bits: d["bits"].(int), Mode: "affine"}
		}
		cases = append(cases, c)
	}
	// mixed_3_6 --q-group-size 32: the group size is written everywhere.
	{
		pred := mixedPredicate(cfg.NumHiddenLayers, 3, 6, 32)
		c := predicateCase{name: "mixed_3_6-g32", block: map[string]any{"group_size": 32, "bits": 4, "mode": "affine"}, want: map[string]*QuantParams{}}
		for _, p := range paths {
			d := pred(p)
			c.block[p] = d
			c.want[p] = &QuantParams{GroupSize: 32, Bits: d["bits"].(int), Mode: "affine"}
		}
		cases = append(cases, c)
	}
	// dynamic_quant: the sensitive modules get {"bits": 5, "group_size": 64} (no
	// mode), the rest follow the top level without an entry of their own.
	{
		c := predicateCase{name: "dynamic", block: map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}, want: map[string]*QuantParams{}}
		for i, p := range paths {
			c.want[p] = &QuantParams{GroupSize: 64, Bits: 4, Mode: "affine"}
			if i%3 == 0 {
				c.block[p] = map[string]any{"bits": 5, "group_size": 64}
				c.want[p].Bits = 5
			}
		}
		cases = append(cases, c)
	}
	// awq: a top level without mode, every leaf module listed, the quantized ones
	// with their group size and bits, the others (norms, and here the embedding,
	// which awq quantizes with its own settings) false or explicit.
	{
		c := predicateCase{name: "awq", block: map[string]any{"group_size": 64, "bits": 4}, want: map[string]*QuantParams{}}
		for _, p := range paths {
			switch {
			case strings.Contains(p, "embed_tokens"):
				c.block[p] = map[string]any{"group_size": 32, "bits": 4}
				c.want[p] = &QuantParams{GroupSize: 32, Bits: 4}
			case strings.Contains(p, "lm_head"):
				c.block[p] = false
			default:
				c.block[p] = map[string]any{"group_size": 64, "bits": 3}
				c.want[p] = &QuantParams{GroupSize: 64, Bits: 3}
			}
		}
		for i := range cfg.NumHiddenLayers {
			c.block[fmt.Sprintf("model.layers.%d.input_layernorm", i)] = false
			c.block[fmt.Sprintf("model.layers.%d.post_attention_layernorm", i)] = false
		}
		c.block["model.norm"] = false
		cases = append(cases, c)
	}
	// gptq: {"bits", "group_size"} at the top (no mode) and the fallback settings
	// for the modules GPTQ left to plain quantization (embedding, lm_head).
	{
		c := predicateCase{name: "gptq", block: map[string]any{"bits": 4, "group_size": 64}, want: map[string]*QuantParams{}}
		for _, p := range paths {
			c.want[p] = &QuantParams{GroupSize: 64, Bits: 4}
			if strings.Contains(p, "embed_tokens") || strings.Contains(p, "lm_head") {
				c.block[p] = map[string]any{"bits": 6, "group_size": 64}
				c.want[p].Bits = 6
			}
		}
		cases = append(cases, c)
	}
	// A model's own quant_predicate returning False (a router, a gate): nothing is
	// recorded, the module is simply stored dense.
	{
		c := predicateCase{name: "model-predicate", block: map[string]any{"group_size": 64, "bits": 8, "mode": "affine"}, want: map[string]*QuantParams{}}
		for _, p := range paths {
			if !strings.HasSuffix(p, "mlp.gate_proj") {
				c.want[p] = &QuantParams{GroupSize: 64, Bits: 8, Mode: "affine"}
			}
		}
		cases = append(cases, c)
	}
	// A top level with null fields and no mode: mlx-lm's defaults, 64 and 4.
	cases = append(cases, predicateCase{name: "null-top", block: map[string]any{"group_size": nil, "bits": nil}, want: map[string]*QuantParams{}})
	for _, p := range paths {
		cases[len(cases)-1].want[p] = &QuantParams{GroupSize: 64, Bits: 4}
	}
	return cases
}

// writePredicateFolder saves a model quantized module by module as want says,
// with block as config.json's quantization and quantization_config.
func writePredicateFolder(t *testing.T, dir string, c predicateCase) *Model {
	t.Helper()
	cfg := mixedConfig()
	m := NewRandom(cfg, 7, cpu(t))
	err := m.forEachModule(func(path string, mod any) error {
		p := c.want[path]
		if p == nil {
			return nil
		}
		switch mod := mod.(type) {
		case *Linear:
			mod.Weight, mod.Scales, mod.Biases = mx.Quantize(mod.Weight, p.GroupSize, p.Bits)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
		case *Embedding:
			mod.Weight, mod.Scales, mod.Biases = mx.Quantize(mod.Weight, p.GroupSize, p.Bits)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), m.Params(), map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	raw := map[string]any{}
	base, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(base, &raw); err != nil {
		t.Fatal(err)
	}
	raw["quantization"], raw["quantization_config"] = c.block, c.block
	out, _ := json.MarshalIndent(raw, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadMlxLMQuantRecipes(t *testing.T) {
	b := cpu(t)
	ids := func(m *Model) *mx.Array {
		a, err := m.Tokens(parityTokens...)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range predicateCases(t) {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mem := writePredicateFolder(t, dir, c)
			m, err := Load(dir, b)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := map[string]*QuantParams{}
			m.forEachModule(func(path string, mod any) error {
				switch mod := mod.(type) {
				case *Linear:
					if mod.quantized() {
						got[path] = &QuantParams{GroupSize: mod.GroupSize, Bits: mod.Bits}
					}
				case *Embedding:
					if mod.quantized() {
						got[path] = &QuantParams{GroupSize: mod.GroupSize, Bits: mod.Bits}
					}
				}
				return nil
			})
			for path, w := range c.want {
				g := got[path]
				switch {
				case w == nil && g != nil:
					t.Errorf("%s: loaded %d-bit groups of %d, want dense", path, g.Bits, g.GroupSize)
				case w != nil && g == nil:
					t.Errorf("%s: loaded dense, want %d-bit groups of %d", path, w.Bits, w.GroupSize)
				case w != nil && (g.Bits != w.Bits || g.GroupSize != w.GroupSize):
					t.Errorf("%s: loaded %d-bit groups of %d, want %d-bit groups of %d", path, g.Bits, g.GroupSize, w.Bits, w.GroupSize)
				}
			}
			want := floats(t, mem.Forward(ids(mem), nil))
			if d := maxAbsDiff(floats(t, m.Forward(ids(m), nil)), want); d != 0 {
				t.Errorf("logits of the loaded folder differ from the model saved by %g", d)
			}
		})
	}
}

// A module whose own group size is null, in a folder whose top level says 32 while
// its tensors were written with mlx-lm's default of 64 (what mlx-lm's loader reads
// a null as), loads with the group size its tensors have.
func TestQuantNullGroupFollowsTensors(t *testing.T) {
	cfg := mixedConfig()
	paths := quantModules(t, cfg)
	c := predicateCase{name: "hand-edited", block: map[string]any{"group_size": 32, "bits": 4, "mode": "affine"}, want: map[string]*QuantParams{}}
	for _, p := range paths {
		c.want[p] = &QuantParams{GroupSize: 32, Bits: 4}
	}
	c.block["model.layers.1.mlp.down_proj"] = map[string]any{"group_size": nil, "bits": 8}
	c.want["model.layers.1.mlp.down_proj"] = &QuantParams{GroupSize: 64, Bits: 8}
	dir := t.TempDir()
	writePredicateFolder(t, dir, c)
	m, err := Load(dir, cpu(t))
	if err != nil {
		t.Fatal(err)
	}
	var got *Linear
	m.Linears(func(path string, l *Linear) {
		if path == "model.layers.1.mlp.down_proj" {
			got = l
		}
	})
	if got.GroupSize != 64 || got.Bits != 8 {
		t.Errorf("down_proj loaded as %d-bit groups of %d, want 8-bit groups of 64", got.Bits, got.GroupSize)
	}
}

// Modes Inloop cannot compute are refused by their name, at the top level or on
// one module, never read as affine.
func TestQuantModeRefusedByName(t *testing.T) {
	for _, tc := range []struct{ name, block, want string }{
		{"top", `{"group_size": 32, "bits": 4, "mode": "mxfp4"}`, `the model uses "mxfp4"`},
		{"module", `{"group_size": 64, "bits": 4, "mode": "affine", "model.layers.0.mlp.up_proj": {"group_size": 16, "bits": 4, "mode": "nvfp4"}}`, `model.layers.0.mlp.up_proj uses "nvfp4"`},
		{"inherited", `{"group_size": 32, "bits": 8, "mode": "mxfp8", "model.layers.0.mlp.up_proj": {"bits": 8}}`, `"mxfp8"`},
		{"hf", `{"quant_method": "gptq", "bits": 4, "group_size": 128}`, `"gptq"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
				"num_attention_heads":4,"vocab_size":100,"quantization":` + tc.block + `}`
			_, err := ParseConfig([]byte(cfg))
			if !errors.Is(err, ErrQuantMode) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrQuantMode naming %s", err, tc.want)
			}
		})
	}
}

// The block mixed_3_6 writes without --q-group-size, which used to fail with
// "group size 0", parses to the top level's group size.
func TestQuantNullModuleGroupParses(t *testing.T) {
	cfg := `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
		"num_attention_heads":4,"vocab_size":100,"quantization":{"group_size":64,"bits":4,"mode":"affine",
		"model.layers.0.mlp.down_proj":{"group_size":null,"bits":6,"mode":"affine"},
		"model.layers.0.mlp.up_proj":{"bits":3}}}`
	c, err := ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]QuantParams{
		"model.layers.0.mlp.down_proj": {GroupSize: 64, Bits: 6, Mode: "affine"},
		"model.layers.0.mlp.up_proj":   {GroupSize: 64, Bits: 3, Mode: "affine"},
		"model.layers.0.mlp.gate_proj": {GroupSize: 64, Bits: 4, Mode: "affine"},
	} {
		if got, ok := c.Quantization.For(path); !ok || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", path, got, ok, want)
		}
	}
	// Written back, every field is explicit.
	out, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"group_size": null`) {
		t.Errorf("config.json still holds a null group size:\n%s", out)
	}
}
