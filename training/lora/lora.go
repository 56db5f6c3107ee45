// Package lora attaches trainable low-rank adapters to a model's linear layers,
// as mlx-lm's LoRALinear does, saves them in mlx-lm's adapter layout and fuses
// them into the base weights. QLoRA is the same over a quantized base: the base
// stays frozen and quantized, only the adapters train.
package lora

import (
	"encoding/json"
	"errors"
	"fmt"
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

// Apply attaches fresh adapters to the linear layers cfg selects (see Targets):
// lora_a (In, r) uniform in ±1/√In from cfg.Seed, lora_b (r, Out) zeros, so the
// model computes exactly what it did before. It returns the adapted paths.
// Layers that already have an adapter get a new one.
func Apply(m *inference.Model, cfg Config) ([]string, error) {
	cfg = cfg.WithDefaults()
	paths, _, err := Targets(m, cfg)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	b := m.Backend()
	r := cfg.Rank
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
		l.LoRA = &inference.LoRA{
			A:     mx.FromData(b, mx.Float32, a, l.In, r),
			B:     mx.FromData(b, mx.Float32, make([]float32, r*l.Out), r, l.Out),
			Scale: float32(cfg.Scale),
		}
	})
	return paths, nil
}

// Params returns every adapter weight of m by mlx-lm's name
// ("model.layers.3.self_attn.q_proj.lora_a").
func Params(m *inference.Model) map[string]*mx.Array {
	out := map[string]*mx.Array{}
	m.Linears(func(path string, l *inference.Linear) {
		if l.LoRA != nil {
			out[path+".lora_a"] = l.LoRA.A
			out[path+".lora_b"] = l.LoRA.B
		}
	})
	return out
}

// SetParams replaces adapter weights by name. Every name must be an adapter
// of m, with the shape of the array it replaces; names not given are kept.
func SetParams(m *inference.Model, params map[string]*mx.Array) error {
	loras := map[string]*inference.LoRA{}
	m.Linears(func(path string, l *inference.Linear) {
		if l.LoRA != nil {
			loras[path] = l.LoRA
		}
	})
	type set struct {
		dst **mx.Array
		v   *mx.Array
	}
	var todo []set
	for name, v := range params {
		var path string
		var dst func(*inference.LoRA) **mx.Array
		switch {
		case strings.HasSuffix(name, ".lora_a"):
			path, dst = strings.TrimSuffix(name, ".lora_a"), func(l *inference.LoRA) **mx.Array { return &l.A }
		case strings.HasSuffix(name, ".lora_b"):
			path, dst = strings.TrimSuffix(name, ".lora_b"), func(l *inference.LoRA) **mx.Array { return &l.B }
		default:
			return fmt.Errorf("lora: %q is not an adapter weight", name)
		}
		l := loras[path]
		if l == nil {
			return fmt.Errorf("lora: %q has no adapter in this model", path)
		}
		d := dst(l)
		if v == nil || !slices.Equal(v.Shape(), (*d).Shape()) {
			var got []int
			if v != nil {
				got = v.Shape()
			}
			return fmt.Errorf("lora: %s has shape %v, want %v", name, got, (*d).Shape())
		}
		todo = append(todo, set{d, v})
	}
	for _, s := range todo {
		*s.dst = s.v
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
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
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

// Fuse folds every adapter into its base weight, W' = W + Scale·(A·B)ᵀ, and
// removes the adapters. A quantized base is dequantized, updated and quantized
// again with its own settings (or left dense with opts.Dequantize), so the
// fused model computes what the adapted one did up to that rounding. It returns
// the fused paths.
func Fuse(m *inference.Model, opts FuseOptions) ([]string, error) {
	var fused []string
	var err error
	m.Linears(func(path string, l *inference.Linear) {
		if err != nil || l.LoRA == nil {
			return
		}
		lo := l.LoRA
		delta := mx.Transpose(mx.MulScalar(mx.Matmul(lo.A, lo.B), lo.Scale), 1, 0) // (Out, In)
		if l.Scales != nil {
			w := mx.Add(mx.Dequantize(l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits), mx.AsType(delta, l.Scales.DType()))
			if opts.Dequantize {
				l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits = mx.AsType(w, mx.Float32), nil, nil, 0, 0
			} else {
				l.Weight, l.Scales, l.Biases = mx.Quantize(w, l.GroupSize, l.Bits)
			}
		} else {
			l.Weight = mx.Add(l.Weight, mx.AsType(delta, l.Weight.DType()))
		}
		for _, a := range []*mx.Array{l.Weight, l.Scales, l.Biases} {
			if a != nil {
				if e := mx.Eval(a); e != nil {
					err = fmt.Errorf("lora: fuse %s: %w", path, e)
					return
				}
			}
		}
		l.LoRA = nil
		fused = append(fused, path)
	})
	if err != nil {
		return fused, err
	}
	if len(fused) == 0 {
		return nil, errors.New("lora: the model has no adapters to fuse")
	}
	return fused, nil
}

// SetDropout installs dropout with keep-probability 1−p on every adapter's
// input, or removes it with p = 0. seed fixes the masks of the next forward
// pass: each adapter draws from its own stream keyed by seed and its path, so a
// run that sets the same seed per step sees the same masks after a resume.
func SetDropout(m *inference.Model, p float64, seed uint64) {
	m.Linears(func(path string, l *inference.Linear) {
		if l.LoRA == nil {
			return
		}
		if p <= 0 {
			l.LoRA.Drop = nil
			return
		}
		s := pathSeed(seed, path)
		keep := float32(1 - p)
		b := m.Backend()
		l.LoRA.Drop = func(x *mx.Array) *mx.Array {
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
	})
}
