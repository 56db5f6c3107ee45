package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/inloop/inloop/mlxbridge/quant"
)

// Config is a model's config.json, with Hugging Face's field names. Fields the
// architectures here do not use are not kept; QuantizeModel copies the original file
// through, so nothing is lost.
type Config struct {
	ModelType             string       `json:"model_type"`
	Architectures         []string     `json:"architectures,omitempty"`
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads"`
	HeadDim               int          `json:"head_dim,omitempty"` // 0: hidden_size / num_attention_heads
	RMSNormEps            float64      `json:"rms_norm_eps"`
	RopeTheta             float64      `json:"rope_theta"`
	RopeScaling           *RopeScaling `json:"rope_scaling"`
	TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
	VocabSize             int          `json:"vocab_size"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings,omitempty"`
	AttentionBias         bool         `json:"attention_bias,omitempty"` // q/k/v/o biases (qwen2 has q/k/v ones regardless)
	MLPBias               bool         `json:"mlp_bias,omitempty"`
	HiddenAct             string       `json:"hidden_act,omitempty"`
	TorchDType            string       `json:"torch_dtype,omitempty"`
	BOSTokenID            TokenIDs     `json:"bos_token_id,omitempty"`
	EOSTokenID            TokenIDs     `json:"eos_token_id,omitempty"`
	// Quantization is mlx-community's block: the default group size and bits, and
	// per-module overrides. "quantization_config" is read when it has the same shape.
	Quantization *Quantization `json:"quantization,omitempty"`

	// tieSet records whether tie_word_embeddings was present; when it was not,
	// the checkpoint decides (tied exactly when it has no lm_head.weight).
	tieSet bool
}

// RopeScaling is config.json's rope_scaling. Types "default", "linear" and "llama3"
// are supported.
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
}

// UnmarshalJSON accepts the older "type" key for "rope_type".
func (r *RopeScaling) UnmarshalJSON(b []byte) error {
	type plain RopeScaling
	var v struct {
		plain
		OldType string `json:"type"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = RopeScaling(v.plain)
	if r.Type == "" {
		r.Type = v.OldType
	}
	return nil
}

// TokenIDs is a token id field that config.json writes as a number, a list or null.
type TokenIDs []int

func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*t = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	*t = TokenIDs{id}
	return nil
}

func (t TokenIDs) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]int(t))
}

// QuantParams is one module's quantization: MLX affine, bits per weight, one scale
// and bias per GroupSize weights. Mode is "affine" (or empty, meaning affine): the
// only mode Inloop computes; mxfp4, nvfp4 and mxfp8 are refused by name.
type QuantParams struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode,omitempty"`
}

// mlx-lm's defaults for a field a quantization block leaves null or out: what
// mlx.nn's _defaults_for_mode gives in affine mode.
const (
	defaultGroupSize = 64
	defaultBits      = 4
	affineMode       = "affine"
)

// Quantization is config.json's "quantization": defaults for every quantized module
// plus overrides by module path ("model.layers.0.mlp.down_proj": {...}, or false for
// a module left dense), as mlx-lm writes for mixed-precision recipes.
//
// A field left null or out falls back: a module's to the top level's, the top
// level's to mlx-lm's defaults (group size 64, 4 bits, affine). mlx-lm's own loader
// gives a module's null field the mode's default rather than the top level's; the
// two differ only in hand-edited folders, and there the tensors' shapes decide
// (see alternatives).
type Quantization struct {
	QuantParams
	Overrides map[string]*QuantParams // nil value: the module is not quantized

	// unset records the module fields the file left null or out, so that the
	// loader can also try mlx-lm's reading of them.
	unset map[string]quantUnset
}

// quantUnset says which of a module's fields came from a fallback.
type quantUnset struct{ group, bits bool }

// quantBlock is one "quantization" object as written, every field nullable.
type quantBlock struct {
	GroupSize *int    `json:"group_size"`
	Bits      *int    `json:"bits"`
	Mode      *string `json:"mode"`
}

func (q *Quantization) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*q = Quantization{}
	var top quantBlock
	var method string
	modules := map[string]quantBlock{}
	for k, v := range raw {
		var err error
		s := string(bytes.TrimSpace(v))
		switch {
		case k == "group_size":
			err = json.Unmarshal(v, &top.GroupSize)
		case k == "bits":
			err = json.Unmarshal(v, &top.Bits)
		case k == "mode":
			err = json.Unmarshal(v, &top.Mode)
		case k == "quant_method": // a Hugging Face quantization_config (GPTQ, AWQ, ...)
			if json.Unmarshal(v, &method) != nil {
				method = ""
			}
		case s == "false": // a module left dense
			q.override(k, nil)
		case strings.HasPrefix(s, "{"): // a module with its own bits, group size or mode
			var m quantBlock
			err = json.Unmarshal(v, &m)
			modules[k] = m
		}
		if err != nil {
			return fmt.Errorf("quantization key %q: %w", k, err)
		}
	}
	q.GroupSize = derefOr(top.GroupSize, defaultGroupSize)
	q.Bits = derefOr(top.Bits, defaultBits)
	q.Mode = derefOr(top.Mode, "")
	if q.Mode == "" && method != "" {
		q.Mode = method
	}
	for k, m := range modules {
		p := QuantParams{
			GroupSize: derefOr(m.GroupSize, q.GroupSize),
			Bits:      derefOr(m.Bits, q.Bits),
			Mode:      derefOr(m.Mode, q.Mode),
		}
		q.override(k, &p)
		if u := (quantUnset{group: m.GroupSize == nil, bits: m.Bits == nil}); u.group || u.bits {
			if q.unset == nil {
				q.unset = map[string]quantUnset{}
			}
			q.unset[k] = u
		}
	}
	return nil
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func (q *Quantization) override(path string, p *QuantParams) {
	if q.Overrides == nil {
		q.Overrides = map[string]*QuantParams{}
	}
	q.Overrides[path] = p
}

func (q Quantization) MarshalJSON() ([]byte, error) {
	m := map[string]any{"group_size": q.GroupSize, "bits": q.Bits, "mode": cmpOr(q.Mode, affineMode)}
	for k, p := range q.Overrides {
		if p == nil {
			m[k] = false
		} else {
			pp := *p
			pp.Mode = cmpOr(pp.Mode, affineMode)
			m[k] = pp
		}
	}
	return json.Marshal(m)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// For returns the quantization of the module at path (e.g. "model.layers.0.mlp.up_proj").
func (q *Quantization) For(path string) (QuantParams, bool) {
	if q == nil {
		return QuantParams{}, false
	}
	if p, ok := q.Overrides[path]; ok {
		if p == nil {
			return QuantParams{}, false
		}
		return *p, true
	}
	return q.QuantParams, true
}

// alternatives returns the readings of the module at path a loader may accept,
// the first preferred: For's, then, for fields the file left null or out, the
// ones mlx-lm's loader would use (the mode's defaults). The tensors decide
// between them.
func (q *Quantization) alternatives(path string) []QuantParams {
	p, ok := q.For(path)
	if !ok {
		return nil
	}
	alts := []QuantParams{p}
	if u, ok := q.unset[path]; ok {
		m := p
		if u.group {
			m.GroupSize = defaultGroupSize
		}
		if u.bits {
			m.Bits = defaultBits
		}
		if m != p {
			alts = append(alts, m)
		}
	}
	return alts
}

// ErrQuantMode reports a quantization mode other than MLX's affine one.
var ErrQuantMode = errors.New("inference: unsupported quantization mode")

// checkMode refuses every mode but affine, by name.
func checkMode(where, mode string) error {
	if mode == "" || mode == affineMode {
		return nil
	}
	return fmt.Errorf("%w: %s uses %q; only MLX affine quantization (mlx-lm's default) is supported", ErrQuantMode, where, mode)
}

// Limits on config values: far above any model a laptop runs, low enough that a
// hostile config.json cannot make us allocate absurd tables.
const (
	maxHidden       = 1 << 16
	maxIntermediate = 1 << 18
	maxLayers       = 512
	maxHeads        = 1024
	maxHeadDim      = 1024
	maxVocab        = 1 << 22
	maxPositions    = 1 << 24
	maxConfigBytes  = 4 << 20
)

// ErrConfig is wrapped by every error that reports an invalid config.json.
var ErrConfig = errors.New("inference: invalid config")

// ParseConfig reads a config.json, fills Hugging Face's defaults and validates it.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	if len(data) > maxConfigBytes {
		return cfg, fmt.Errorf("%w: config.json is %d bytes", ErrConfig, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	_, cfg.tieSet = raw["tie_word_embeddings"]
	if cfg.TorchDType == "" {
		var dt string
		if json.Unmarshal(raw["dtype"], &dt) == nil {
			cfg.TorchDType = dt
		}
	}
	// Newer transformers nest RoPE settings in rope_parameters.
	if rp, ok := raw["rope_parameters"]; ok && cfg.RopeTheta == 0 {
		var theta struct {
			Theta float64 `json:"rope_theta"`
		}
		var rs RopeScaling
		if json.Unmarshal(rp, &theta) == nil && json.Unmarshal(rp, &rs) == nil {
			cfg.RopeTheta = theta.Theta
			if rs.Type != "" && rs.Type != "default" && cfg.RopeScaling == nil {
				cfg.RopeScaling = &rs
			}
		}
	}
	if cfg.Quantization == nil {
		if qc, ok := raw["quantization_config"]; ok {
			var q Quantization
			if err := json.Unmarshal(qc, &q); err != nil {
				return cfg, fmt.Errorf("%w: quantization_config: %v", ErrConfig, err)
			}
			cfg.Quantization = &q
		}
	}
	if _, ok := raw["rms_norm_eps"]; !ok {
		cfg.RMSNormEps = 1e-6
	}
	if _, ok := raw["rope_theta"]; !ok && cfg.RopeTheta == 0 {
		cfg.RopeTheta = 10000
	}
	if _, ok := raw["num_key_value_heads"]; !ok {
		cfg.NumKeyValueHeads = cfg.NumAttentionHeads
	}
	return cfg, cfg.Validate()
}

// ReadConfig reads dir/config.json.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := readCapped(path, maxConfigBytes)
	if err != nil {
		return Config{}, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Head returns the per-head dimension.
func (c *Config) Head() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads > 0 {
		return c.HiddenSize / c.NumAttentionHeads
	}
	return 0
}

// Validate checks sizes, head layout, RoPE and quantization settings.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		name     string
		v, limit int
	}{
		{"hidden_size", c.HiddenSize, maxHidden},
		{"intermediate_size", c.IntermediateSize, maxIntermediate},
		{"num_hidden_layers", c.NumHiddenLayers, maxLayers},
		{"num_attention_heads", c.NumAttentionHeads, maxHeads},
		{"num_key_value_heads", c.NumKeyValueHeads, maxHeads},
		{"vocab_size", c.VocabSize, maxVocab},
	} {
		if f.v <= 0 || f.v > f.limit {
			return bad("%s = %d, want 1..%d", f.name, f.v, f.limit)
		}
	}
	if c.HeadDim < 0 || c.HeadDim > maxHeadDim {
		return bad("head_dim = %d, want 1..%d", c.HeadDim, maxHeadDim)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return bad("hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)", c.HiddenSize, c.NumAttentionHeads)
	}
	if d := c.Head(); d <= 0 || d%2 != 0 || d > maxHeadDim {
		return bad("head dimension %d must be even and at most %d (RoPE rotates pairs)", d, maxHeadDim)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return bad("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.MaxPositionEmbeddings < 0 || c.MaxPositionEmbeddings > maxPositions {
		return bad("max_position_embeddings = %d, want 0..%d", c.MaxPositionEmbeddings, maxPositions)
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return bad("rms_norm_eps = %g, want a small positive number", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return bad("rope_theta = %g, want a positive number", c.RopeTheta)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return bad("hidden_act %q: only silu (SwiGLU) is supported", c.HiddenAct)
	}
	if err := c.RopeScaling.validate(); err != nil {
		return bad("rope_scaling: %v", err)
	}
	if q := c.Quantization; q != nil {
		if err := checkMode("the model", q.Mode); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if err := quant.Validate(q.Bits, q.GroupSize); err != nil {
			return bad("quantization: %v", err)
		}
		for _, path := range slices.Sorted(maps.Keys(q.Overrides)) {
			p := q.Overrides[path]
			if p == nil {
				continue
			}
			if err := checkMode(path, p.Mode); err != nil {
				return fmt.Errorf("%w: %w", ErrConfig, err)
			}
			if err := quant.Validate(p.Bits, p.GroupSize); err != nil {
				return bad("quantization of %s: %v", path, err)
			}
		}
	}
	return nil
}

func (r *RopeScaling) validate() error {
	if r == nil {
		return nil
	}
	switch r.Type {
	case "", "default":
		return nil
	case "linear":
		if !(r.Factor > 0) {
			return fmt.Errorf("linear factor = %g, want > 0", r.Factor)
		}
	case "llama3":
		if !(r.Factor > 0) || !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) || r.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0; got %+v", *r)
		}
	default:
		return fmt.Errorf("type %q is not supported (default, linear, llama3)", r.Type)
	}
	return nil
}

// RopeFrequencies returns the inverse frequencies of the head's rotary pairs,
// θ_i = base^(−2i/d), adjusted as Hugging Face does for rope_scaling.
func (c *Config) RopeFrequencies() []float64 {
	d := c.Head()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(d))
	}
	r := c.RopeScaling
	if r == nil {
		return inv
	}
	switch r.Type {
	case "linear":
		for i := range inv {
			inv[i] /= r.Factor
		}
	case "llama3":
		// Long wavelengths are slowed by factor, short ones kept, the band between
		// blended (transformers' _compute_llama3_parameters).
		old := float64(r.OriginalMaxPositionEmbeddings)
		lowWave, highWave := old/r.LowFreqFactor, old/r.HighFreqFactor
		for i, f := range inv {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave:
			case wave > lowWave:
				inv[i] = f / r.Factor
			default:
				s := (old/wave - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				inv[i] = (1-s)*f/r.Factor + s*f
			}
		}
	}
	return inv
}

// tied reports whether the output projection is the embedding, given whether the
// checkpoint has an lm_head.
func (c *Config) tied(hasHead bool) bool {
	if c.tieSet {
		return c.TieWordEmbeddings
	}
	return !hasHead
}

// JSON renders the config as config.json.
func (c *Config) JSON() ([]byte, error) {
	cc := *c
	if cc.Quantization != nil {
		q := *cc.Quantization
		q.Mode = cmpOr(q.Mode, affineMode)
		cc.Quantization = &q
	}
	type plain Config
	out, err := json.MarshalIndent(struct {
		plain
		QuantizationConfig *Quantization `json:"quantization_config,omitempty"`
	}{plain(cc), cc.Quantization}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// StopTokens returns the config's EOS ids, the default stop set for generation.
func (c *Config) StopTokens() []int { return slices.Clone(c.EOSTokenID) }
