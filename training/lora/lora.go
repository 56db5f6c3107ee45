// Package lora attaches trainable low-rank adapters to a model's linear layers,
// as mlx-lm's LoRALinear does, saves them in mlx-lm's adapter layout and fuses
// them into the base weights. QLoRA is the same over a quantized base: the base
// stays frozen and quantized, only the adapters train.
package lora

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/inloop/inloop/internal/atomicfile"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// mlx-lm's defaults (mlx_lm.lora's CONFIG_DEFAULTS).
const (
	DefaultNumLayers = 16
	DefaultRank      = 8
	DefaultScale     = 20.0
)

// File names of mlx-lm's adapter layout.
const (
	AdaptersFile = "adapters.safetensors"
	ConfigFile   = "adapter_config.json"
)

// Config says where adapters go and how they are shaped.
type Config struct {
	// NumLayers is how many of the last transformer blocks get adapters;
	// 0 means DefaultNumLayers, -1 (or more than the model has) means all.
	NumLayers int
	Rank      int     // 0 means DefaultRank
	Scale     float64 // 0 means DefaultScale
	Dropout   float64 // on the adapter's input, in training only; in [0, 1)
	// Keys are the linear layers of a block to adapt, by their path inside
	// the block ("self_attn.q_proj", "mlp.down_proj"); empty means every
	// linear layer of the block.
	Keys []string
	Seed uint64 // initialization of lora_a
	// Name names the adapter in a stack listing ("ttt", "ror", "tao"; empty:
	// "lora"). It is not saved.
	Name string `json:"-"`
}

// WithDefaults fills the zero fields with mlx-lm's defaults.
func (c Config) WithDefaults() Config {
	if c.NumLayers == 0 {
		c.NumLayers = DefaultNumLayers
	}
	if c.Rank == 0 {
		c.Rank = DefaultRank
	}
	if c.Scale == 0 {
		c.Scale = DefaultScale
	}
	return c
}

// Validate reports settings out of range.
func (c Config) Validate() error {
	switch {
	case c.Rank < 0:
		return fmt.Errorf("lora: rank %d", c.Rank)
	case c.NumLayers < -1:
		return fmt.Errorf("lora: num_layers %d (use -1 for all)", c.NumLayers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("lora: dropout %g is not in [0, 1)", c.Dropout)
	case math.IsNaN(c.Scale) || math.IsInf(c.Scale, 0):
		return fmt.Errorf("lora: scale %g", c.Scale)
	}
	return nil
}

// blockPath splits "model.layers.N.rest" into N and rest.
func blockPath(path string) (int, string, bool) {
	const pre = "model.layers."
	if !strings.HasPrefix(path, pre) {
		return 0, "", false
	}
	num, rest, ok := strings.Cut(path[len(pre):], ".")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	return n, rest, true
}

// Targets lists the paths of the linear layers cfg adapts in m, in model order,
// and the block keys they cover.
func Targets(m *inference.Model, cfg Config) (paths, keys []string, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	n := m.Config().NumHiddenLayers
	first := 0
	if cfg.NumLayers >= 0 && cfg.NumLayers < n {
		first = n - cfg.NumLayers
	}
	found := map[string]bool{}
	m.Linears(func(path string, l *inference.Linear) {
		i, rest, ok := blockPath(path)
		if !ok || i < first {
			return
		}
		if len(cfg.Keys) > 0 && !slices.Contains(cfg.Keys, rest) {
			return
		}
		found[rest] = true
		paths = append(paths, path)
	})
	for _, k := range cfg.Keys {
		if !found[k] {
			return nil, nil, fmt.Errorf("lora: key %q names no linear layer of the adapted blocks", k)
		}
	}
	if len(paths) == 0 {
		return nil, nil, errors.New("lora: no linear layers to adapt")
	}
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return paths, keys, nil
}

// pathSeed mixes the run's seed with a layer's path, so each adapter gets its
// own stream and adding a key does not shift the others.
func pathSeed(seed uint64, path string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(path))
	return seed ^ h.Sum64()
}

// New makes a fresh adapter for the linear layers cfg selects (see Targets):
// lora_a (In, r) uniform in ±1/√In from cfg.Seed, lora_b (r, Out) zeros, so a
// model computes exactly what it did before it was pushed. It returns the
// adapter and its paths; m is only read.
func New(m *inference.Model, cfg Config) (*inference.Adapter, []string, error) {
	cfg = cfg.WithDefaults()
	paths, _, err := Targets(m, cfg)
	if err != nil {
		return nil, nil, err
	}
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	b := m.Backend()
	r := cfg.Rank
	loras := map[string]inference.LoRA{}
	m.Linears(func(path string, l *inference.Linear) {
		if !want[path] {
			return
		}
		bound := 1 / math.Sqrt(float64(l.In))
		rng := rand.New(rand.NewPCG(pathSeed(cfg.Seed, path), 0x9e3779b97f4a7c15))
		a := make([]float32, l.In*r)
		for i := range a {
			a[i] = float32(bound * (2*rng.Float64() - 1))
		}
		loras[path] = inference.LoRA{
			A:     mx.FromData(b, mx.Float32, a, l.In, r),
			B:     mx.FromData(b, mx.Float32, make([]float32, r*l.Out), r, l.Out),
			Scale: float32(cfg.Scale),
		}
	})
	name := cfg.Name
	if name == "" {
		name = "lora"
	}
	return inference.NewAdapter(name, loras), paths, nil
}

// Apply pushes a fresh adapter (see New) onto m's adapter stack and returns the
// adapted paths. Adapters already there stay below it, untouched; the functions
// here that read or change weights (Params, SetParams, SetDropout, Save) work on
// the top one. A trainer that must not disturb a model in use applies it to a
// m.Fork() (see inference.Model.Fork).
func Apply(m *inference.Model, cfg Config) ([]string, error) {
	a, paths, err := New(m, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := m.PushAdapter(a); err != nil {
		return nil, err
	}
	return paths, nil
}

// Params returns the weights of m's top adapter by mlx-lm's name
// ("model.layers.3.self_attn.q_proj.lora_a"); empty when m has none.
func Params(m *inference.Model) map[string]*mx.Array {
	top := m.TopAdapter()
	if top == nil {
		return map[string]*mx.Array{}
	}
	return top.Params()
}

// SetParams replaces weights of m's top adapter by name. Every name must be an
// adapter weight of it, with the shape of the array it replaces; names not given
// are kept. The model's adapter version changes.
func SetParams(m *inference.Model, params map[string]*mx.Array) error {
	if _, err := m.SetAdapterParams(params); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// AdapterConfig is the adapter_config.json Save writes for cfg.
func AdapterConfig(m *inference.Model, cfg Config) (*inference.AdapterConfig, error) {
	cfg = cfg.WithDefaults()
	_, keys, err := Targets(m, cfg)
	if err != nil {
		return nil, err
	}
	ac := &inference.AdapterConfig{FineTuneType: "lora", NumLayers: cfg.NumLayers}
	if ac.NumLayers < 0 || ac.NumLayers > m.Config().NumHiddenLayers {
		ac.NumLayers = m.Config().NumHiddenLayers
	}
	ac.LoRAParameters.Rank = cfg.Rank
	ac.LoRAParameters.Scale = cfg.Scale
	ac.LoRAParameters.Dropout = cfg.Dropout
	ac.LoRAParameters.Keys = keys
	return ac, nil
}

// Save writes m's adapters in mlx-lm's layout: dir/adapters.safetensors and
// dir/adapter_config.json, each replaced atomically. mlx-lm and
// inference.LoadAdapter read it.
func Save(dir string, m *inference.Model, cfg Config) error {
	params := Params(m)
	if len(params) == 0 {
		return errors.New("lora: the model has no adapters to save")
	}
	ac, err := AdapterConfig(m, cfg)
	if err != nil {
		return err
	}
	return SaveArrays(dir, params, ac)
}

// SaveArrays writes already collected adapter weights with their config.
func SaveArrays(dir string, params map[string]*mx.Array, ac *inference.AdapterConfig) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(ac, "", "    ")
	if err != nil {
		return err
	}
	if err := mx.SaveSafetensors(filepath.Join(dir, AdaptersFile), params, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	return writeAtomic(filepath.Join(dir, ConfigFile), append(raw, '\n'))
}

func writeAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	return nil
}

// FuseOptions adjusts Fuse.
type FuseOptions struct {
	// Dequantize leaves fused quantized layers dense (float32) instead of
	// quantizing them again with their own bits and group size.
	Dequantize bool
}

// Fuse folds every adapter of m's stack into its base weight,
// W' = W + Σ Scale·(A·B)ᵀ, and removes the adapters (inference.Model.FuseAdapters).
// A quantized base is dequantized, updated and quantized again with its own
// settings (or left dense with opts.Dequantize), so the fused model computes
// what the adapted one did up to that rounding. It returns the fused paths.
func Fuse(m *inference.Model, opts FuseOptions) ([]string, error) {
	paths, err := m.FuseAdapters(opts.Dequantize)
	if err != nil {
		return paths, fmt.Errorf("lora: %w", err)
	}
	return paths, nil
}

// SetDropout installs dropout with keep-probability 1−p on the input of every
// update of m's top adapter, or removes it with p = 0. seed fixes the masks of
// the next forward pass: each layer draws from its own stream keyed by seed and
// its path, so a run that sets the same seed per step sees the same masks after
// a resume. Like any change of the adapters, it changes m's adapter version
// (removing dropout that is not there changes nothing).
func SetDropout(m *inference.Model, p float64, seed uint64) {
	top := m.TopAdapter()
	if top == nil {
		return
	}
	if p <= 0 {
		has := false
		for _, path := range top.Paths() {
			lo, _ := top.LoRA(path)
			has = has || lo.Drop != nil
		}
		if !has {
			return
		}
		m.ReplaceAdapter(top.WithDropout(nil)) // same shapes: cannot fail
		return
	}
	keep := float32(1 - p)
	b := m.Backend()
	m.ReplaceAdapter(top.WithDropout(func(path string) func(*mx.Array) *mx.Array {
		s := pathSeed(seed, path)
		return func(x *mx.Array) *mx.Array {
			shape := x.Shape()
			n := 1
			for _, d := range shape {
				n *= d
			}
			rng := rand.New(rand.NewPCG(s, 0x9e3779b97f4a7c15))
			mask := make([]float32, n)
			for i := range mask {
				if rng.Float32() < keep {
					mask[i] = 1 / keep
				}
			}
			return mx.Mul(x, mx.AsType(mx.FromData(b, mx.Float32, mask, shape...), x.DType()))
		}
	}))
}
