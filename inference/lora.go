package inference

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// LoRA is a low-rank update beside a frozen Linear, as in mlx-lm's LoRALinear:
// y = base(x) + Scale·(drop(x)·A)·B with A (In, r) and B (r, Out).
type LoRA struct {
	A, B  *mx.Array
	Scale float32
	// Drop, when set, is applied to the input of the update only (mlx-lm's
	// LoRA dropout). A trainer sets it while training and clears it for
	// evaluation; inference leaves it nil.
	Drop func(x *mx.Array) *mx.Array
}

// Forward returns the update Scale·(drop(x)·A)·B for x (..., In), in x's dtype
// as mlx-lm's LoRALinear gives it: float32 adapters over a bfloat16 model add a
// bfloat16 update, and the activations stay bfloat16.
func (l *LoRA) Forward(x *mx.Array) *mx.Array {
	dt := x.DType()
	if l.Drop != nil {
		x = l.Drop(x)
	}
	z := mx.MulScalar(mx.Matmul(mx.Matmul(x, l.A), l.B), l.Scale)
	if z.DType() != dt {
		z = mx.AsType(z, dt)
	}
	return z
}

// AddTo returns y + Forward(x), the layer's output with the update added. A
// float32 update with no dropout is mx.AddLowRank, which a backend may fuse
// while decoding.
func (l *LoRA) AddTo(y, x *mx.Array) *mx.Array {
	if l.Drop == nil && x.DType() == mx.Float32 && y.DType() == mx.Float32 {
		return mx.AddLowRank(y, x, l.A, l.B, l.Scale)
	}
	return mx.Add(y, l.Forward(x))
}

// Linears calls fn on every Linear of the model with its checkpoint path
// ("model.layers.3.self_attn.q_proj"), layers in order.
func (m *Model) Linears(fn func(path string, l *Linear)) {
	visit := func(prefix string, v any) {
		walk(prefix, reflect.ValueOf(v), func(path string, f reflect.Value) error {
			if l, ok := f.Interface().(*Linear); ok {
				fn(path, l)
			}
			return nil
		})
	}
	visit("", m)
	for i, l := range m.layers {
		visit(fmt.Sprintf("model.layers.%d.", i), l)
	}
}

// AdapterConfig is mlx-lm's adapter_config.json, the fields Inloop reads and writes.
type AdapterConfig struct {
	FineTuneType   string `json:"fine_tune_type"`
	NumLayers      int    `json:"num_layers"`
	LoRAParameters struct {
		Rank    int      `json:"rank"`
		Scale   float64  `json:"scale"`
		Dropout float64  `json:"dropout"`
		Keys    []string `json:"keys,omitempty"`
	} `json:"lora_parameters"`
}

// maxAdapterConfig caps adapter_config.json; real ones are a few hundred bytes.
const maxAdapterConfig = 1 << 20

// LoadAdapter reads the LoRA adapter in dir (see ReadAdapter) and pushes it onto
// m's adapter stack.
func LoadAdapter(m *Model, dir string) (*AdapterConfig, error) {
	a, cfg, err := ReadAdapter(m, dir)
	if err != nil {
		return nil, err
	}
	if _, err := m.PushAdapter(a); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ReadAdapter reads the LoRA adapter in dir (mlx-lm's layout: adapter_config.json and
// adapters.safetensors with "<linear path>.lora_a" / ".lora_b") for m, without
// attaching it. Every adapter tensor must belong to a Linear of m with matching
// shapes.
func ReadAdapter(m *Model, dir string) (*Adapter, *AdapterConfig, error) {
	raw, err := readCapped(filepath.Join(dir, "adapter_config.json"), maxAdapterConfig)
	if err != nil {
		return nil, nil, err
	}
	var cfg AdapterConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, nil, fmt.Errorf("inference: adapter: adapter_config.json: %w", err)
	}
	if cfg.FineTuneType != "" && cfg.FineTuneType != "lora" {
		return nil, nil, fmt.Errorf("inference: adapter: fine_tune_type %q is not supported (only lora)", cfg.FineTuneType)
	}
	if cfg.LoRAParameters.Rank <= 0 {
		return nil, nil, fmt.Errorf("inference: adapter: rank %d", cfg.LoRAParameters.Rank)
	}
	f, err := safetensors.Open(filepath.Join(dir, "adapters.safetensors"))
	if err != nil {
		return nil, nil, fmt.Errorf("inference: adapter: %w", err)
	}
	defer f.Close()
	linears := map[string]*Linear{}
	m.Linears(func(path string, l *Linear) { linears[path] = l })
	pending := map[string]LoRA{}
	for _, name := range f.Names() {
		path, part, ok := splitParamName(name)
		if !ok {
			return nil, nil, fmt.Errorf("inference: adapter: unexpected tensor %q", name)
		}
		l := linears[path]
		if l == nil {
			return nil, nil, fmt.Errorf("inference: adapter: %q is not a linear layer of this model", path)
		}
		a, err := mx.LoadTensor(m.b, f, name)
		if err != nil {
			return nil, nil, fmt.Errorf("inference: adapter: %w", err)
		}
		a = mx.AsType(a, mx.Float32)
		r := cfg.LoRAParameters.Rank
		want := []int{l.In, r}
		if part == "b" {
			want = []int{r, l.Out}
		}
		if s := a.Shape(); len(s) != 2 || s[0] != want[0] || s[1] != want[1] {
			return nil, nil, fmt.Errorf("inference: adapter: %s has shape %v, want %v", name, s, want)
		}
		lo := pending[path]
		lo.Scale = float32(cfg.LoRAParameters.Scale)
		if part == "a" {
			lo.A = a
		} else {
			lo.B = a
		}
		pending[path] = lo
	}
	if len(pending) == 0 {
		return nil, nil, fmt.Errorf("inference: adapter: adapters.safetensors has no LoRA tensors")
	}
	for p, lo := range pending {
		if lo.A == nil || lo.B == nil {
			return nil, nil, fmt.Errorf("inference: adapter: %s has only one of lora_a and lora_b", p)
		}
	}
	return NewAdapter(dir, pending), &cfg, nil
}
