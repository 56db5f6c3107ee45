package inference

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/mlxbridge/quant"
)

// Real config.json files (trimmed of fields we ignore only where noted).
const (
	smolConfig = `{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "eos_token_id": 0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
  "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
  "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
  "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "vocab_size": 49152}`
	qwen3Config = `{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936}`
	llama32Config = `{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256}`
	mlxQwenConfig = `{
  "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
  "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2,
  "quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8},
    "lm_head": false},
  "quantization_config": {"group_size": 64, "bits": 4},
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936}`
)

func TestParseRealConfigs(t *testing.T) {
	smol, err := ParseConfig([]byte(smolConfig))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := smol, SmolLM2_135M(); got.HiddenSize != want.HiddenSize || got.IntermediateSize != want.IntermediateSize ||
		got.NumHiddenLayers != want.NumHiddenLayers || got.NumAttentionHeads != want.NumAttentionHeads ||
		got.NumKeyValueHeads != want.NumKeyValueHeads || got.Head() != want.Head() || got.VocabSize != want.VocabSize ||
		got.RopeTheta != want.RopeTheta || got.RMSNormEps != want.RMSNormEps || !got.TieWordEmbeddings ||
		got.MaxPositionEmbeddings != want.MaxPositionEmbeddings {
		t.Errorf("SmolLM2 config.json parses to %+v,\npreset is %+v", got, want)
	}
	qwen, err := ParseConfig([]byte(qwen3Config))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := qwen, Qwen3_0_6B(); got.HiddenSize != want.HiddenSize || got.Head() != 128 ||
		got.NumKeyValueHeads != want.NumKeyValueHeads || got.RopeTheta != 1e6 || got.RMSNormEps != 1e-6 ||
		got.VocabSize != want.VocabSize || got.NumHiddenLayers != want.NumHiddenLayers ||
		got.IntermediateSize != want.IntermediateSize || got.StopTokens()[0] != 151645 {
		t.Errorf("Qwen3 config.json parses to %+v,\npreset is %+v", got, want)
	}
	ll, err := ParseConfig([]byte(llama32Config))
	if err != nil {
		t.Fatal(err)
	}
	if rs := ll.RopeScaling; rs == nil || rs.Type != "llama3" || rs.Factor != 32 || rs.OriginalMaxPositionEmbeddings != 8192 {
		t.Errorf("rope_scaling = %+v", rs)
	}
	if got := ll.StopTokens(); len(got) != 3 || got[2] != 128009 {
		t.Errorf("eos ids = %v", got)
	}
	mq, err := ParseConfig([]byte(mlxQwenConfig))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := mq.Quantization.For("model.layers.1.mlp.up_proj"); !ok || p.Bits != 4 || p.GroupSize != 64 {
		t.Errorf("default quantization = %+v %v", p, ok)
	}
	if p, ok := mq.Quantization.For("model.layers.0.mlp.down_proj"); !ok || p.Bits != 8 {
		t.Errorf("override = %+v %v", p, ok)
	}
	if _, ok := mq.Quantization.For("lm_head"); ok {
		t.Errorf("lm_head: false should leave it dense")
	}
	if mq.RMSNormEps != 1e-6 || mq.Head() != 64 {
		t.Errorf("eps %g head %d", mq.RMSNormEps, mq.Head())
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,
		"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 4 || c.Head() != 16 || c.RMSNormEps != 1e-6 || c.RopeTheta != 10000 {
		t.Errorf("defaults: kv heads %d, head %d, eps %g, theta %g", c.NumKeyValueHeads, c.Head(), c.RMSNormEps, c.RopeTheta)
	}
	if c.tied(true) || !c.tied(false) {
		t.Errorf("without tie_word_embeddings the checkpoint should decide")
	}
	// transformers ≥ 4.56 nests RoPE in rope_parameters.
	c, err = ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,
		"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,
		"rope_parameters":{"rope_type":"llama3","rope_theta":500000,"factor":8,"low_freq_factor":1,
		"high_freq_factor":4,"original_max_position_embeddings":8192}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 500000 || c.RopeScaling == nil || c.RopeScaling.Factor != 8 {
		t.Errorf("rope_parameters: theta %g scaling %+v", c.RopeTheta, c.RopeScaling)
	}
}

func TestConfigRejects(t *testing.T) {
	base := `"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"vocab_size":100`
	for _, c := range []struct{ json, want string }{
		{`{` + base + `,"num_attention_heads":0}`, "num_attention_heads = 0"},
		{`{` + base + `,"num_attention_heads":6}`, "not a multiple of num_attention_heads"},
		{`{` + base + `,"num_attention_heads":4,"num_key_value_heads":3}`, "not a multiple of num_key_value_heads"},
		{`{` + base + `,"num_attention_heads":4,"head_dim":15}`, "must be even"},
		{`{` + base + `,"num_attention_heads":4,"hidden_act":"gelu"}`, "only silu"},
		{`{` + base + `,"num_attention_heads":4,"rope_scaling":{"rope_type":"yarn","factor":4}}`, `"yarn" is not supported`},
		{`{` + base + `,"num_attention_heads":4,"rope_scaling":{"rope_type":"llama3","factor":8}}`, "llama3 needs"},
		{`{` + base + `,"num_attention_heads":4,"quantization":{"group_size":48,"bits":4}}`, "group size 48"},
		{`{` + base + `,"num_attention_heads":4,"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128}}`, `"gptq"`},
		{`{` + base + `,"num_attention_heads":4,"rms_norm_eps":0}`, "rms_norm_eps"},
		{`{"model_type":"llama","hidden_size":100000000,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1}`, "hidden_size = 100000000"},
		{`{` + base + `,"num_attention_heads":4,"vocab_size":-1}`, "vocab_size = -1"},
		{`[1,2]`, "invalid config"},
	} {
		_, err := ParseConfig([]byte(c.json))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseConfig(%s) = %v, want an ErrConfig mentioning %q", c.json, err, c.want)
		}
	}
}

func TestRopeFrequencies(t *testing.T) {
	c := tinyConfig("llama")
	c.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
	// θ_i = 10000^(−i/8); wavelengths 2π/θ_i below 64/4 keep θ_i, above 64/1 divide by 8,
	// and between blend with s = (64/λ − 1)/3: (1−s)·θ/8 + s·θ.
	want := []float64{1, 0.24438459943539834, 0.013042256043820465, 0.003952847075210474,
		0.00125, 0.0003952847075210474, 0.000125, 3.952847075210474e-05}
	got := c.RopeFrequencies()
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-15*max(1, want[i]) {
			t.Errorf("θ_%d = %.17g, want %.17g", i, got[i], want[i])
		}
	}
	ll, _ := ParseConfig([]byte(llama32Config))
	f := ll.RopeFrequencies()
	for _, c := range []struct {
		i    int
		want float64
	}{{0, 1}, {20, 8.570255489881478e-06}, {21, 5.687232150457046e-06}, {22, 3.7740542941082826e-06}, {31, 9.41830672543491e-08}} {
		if math.Abs(f[c.i]-c.want) > 1e-12*c.want {
			t.Errorf("Llama 3.2 θ_%d = %g, want %g", c.i, f[c.i], c.want)
		}
	}
	c.RopeScaling = &RopeScaling{Type: "linear", Factor: 4}
	if got := c.RopeFrequencies(); got[1] != math.Pow(10000, -1.0/8)/4 {
		t.Errorf("linear θ_1 = %g", got[1])
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	c := Qwen3_0_6B()
	c.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: 4},
		Overrides: map[string]*QuantParams{"lm_head": nil, "model.layers.0.mlp.down_proj": {GroupSize: 32, Bits: 8}}}
	data, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"quantization_config"`, `"mode": "affine"`, `"lm_head": false`, `"rope_scaling": null`} {
		if !strings.Contains(string(data), s) {
			t.Errorf("config.json lacks %s:\n%s", s, data)
		}
	}
	back, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := back.Quantization.For("model.layers.0.mlp.down_proj"); !ok || p.Bits != 8 || p.GroupSize != 32 {
		t.Errorf("override after round trip = %+v, %v", p, ok)
	}
	if back.HiddenSize != 1024 || back.Head() != 128 || !back.TieWordEmbeddings || back.EOSTokenID[0] != 151645 {
		t.Errorf("round trip lost fields: %+v", back)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{smolConfig, qwen3Config, llama32Config, mlxQwenConfig} {
		f.Add([]byte(s))
	}
	// What mlx_lm.convert --quant-predicate mixed_3_6 writes (null group sizes).
	if mixed, err := os.ReadFile(filepath.Join("testdata", "mlxlm", "mixed_3_6", "config.json")); err == nil {
		f.Add(mixed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		// A validated quantization resolves every module to bits and a group size
		// MLX supports, in affine mode; written back, it parses to the same.
		if q := c.Quantization; q != nil {
			for path := range q.Overrides {
				p, ok := q.For(path)
				if ok && (quant.Validate(p.Bits, p.GroupSize) != nil || checkMode(path, p.Mode) != nil) {
					t.Fatalf("%s resolved to %+v", path, p)
				}
			}
			out, err := c.JSON()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseConfig(out)
			if err != nil {
				t.Fatalf("written back, the config no longer parses: %v\n%s", err, out)
			}
			for path := range q.Overrides {
				a, aok := q.For(path)
				b, bok := back.Quantization.For(path)
				if aok != bok || a.Bits != b.Bits || a.GroupSize != b.GroupSize {
					t.Fatalf("%s: %+v %v, written back %+v %v", path, a, aok, b, bok)
				}
			}
		}
		// A config that validates must give sizes the model code can build on.
		if c.Head()%2 != 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.VocabSize <= 0 {
			t.Fatalf("validated config with head %d, heads %d/%d, vocab %d", c.Head(), c.NumAttentionHeads, c.NumKeyValueHeads, c.VocabSize)
		}
		_ = c.RopeFrequencies()
	})
}
