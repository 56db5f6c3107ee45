package inference

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Block is one transformer layer of an architecture: x (B, L, hidden) in and out,
// reading and extending its layer's cache (nil when there is none).
type Block interface {
	Forward(x *mx.Array, c *LayerCache) *mx.Array
}

// Architecture describes one model_type: how to build an empty layer whose tagged
// modules the loader fills (tags relative to "model.layers.N.").
type Architecture struct {
	NewBlock func(cfg *Config, layer int) Block
}

var architectures = map[string]Architecture{}

// Register makes an architecture loadable by model_type; architecture files call it
// from init.
func Register(modelType string, a Architecture) {
	if _, dup := architectures[modelType]; dup {
		panic("inference: architecture registered twice: " + modelType)
	}
	architectures[modelType] = a
}

// ErrUnknownArchitecture reports a model_type no file here implements.
var ErrUnknownArchitecture = errors.New("inference: unknown architecture")

func lookup(cfg *Config) (Architecture, error) {
	a, ok := architectures[cfg.ModelType]
	if !ok {
		return a, fmt.Errorf("%w: model_type %q (supported: %s)", ErrUnknownArchitecture, cfg.ModelType,
			strings.Join(slices.Sorted(maps.Keys(architectures)), ", "))
	}
	return a, nil
}

// Model is a loaded decoder-only transformer: embedding, layers, final norm and the
// output projection (the embedding itself when tied). Its weights are read-only;
// conversation state is in a Cache. The top modules are exported (and every Linear
// reachable through Linears) for adapters and trainers.
type Model struct {
	cfg    Config
	b      mx.Backend
	Embed  *Embedding `tensor:"model.embed_tokens"`
	layers []Block
	Norm   *RMSNorm `tensor:"model.norm"`
	LMHead *Linear  `tensor:"lm_head"` // nil when tied

	ad adapterStack // the LoRA adapters over the frozen weights (adapter.go)

	// act is SetInt8Decode's, SetInt8Prefill's and SetBF16Prefill's choices, shared
	// with the copies made from the model (WithParams, Fork) and read by every linear
	// layer and the embedding.
	act *actChoice

	warnings []string
}

// build allocates the empty modules cfg implies.
func build(cfg Config, b mx.Backend, hasHead bool) (*Model, error) {
	arch, err := lookup(&cfg)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, b: b,
		Embed: &Embedding{Vocab: cfg.VocabSize, Dim: cfg.HiddenSize},
		Norm:  &RMSNorm{Dim: cfg.HiddenSize, Eps: float32(cfg.RMSNormEps)},
	}
	m.cfg.TieWordEmbeddings = cfg.tied(hasHead)
	m.cfg.tieSet = true
	if !m.cfg.TieWordEmbeddings {
		m.LMHead = &Linear{In: cfg.HiddenSize, Out: cfg.VocabSize}
	}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		m.layers = append(m.layers, arch.NewBlock(&m.cfg, i))
	}
	m.ad.keep, m.ad.history = DefaultAdapterHistory, []*AdapterState{{}}
	m.shareAct(new(actChoice))
	return m, nil
}

// bind fills every module of m from src.
func (m *Model) bind(bd *binder) error {
	if err := bd.bind("", m); err != nil {
		return err
	}
	for i, l := range m.layers {
		if err := bd.bind("model.layers."+strconv.Itoa(i)+".", l); err != nil {
			return err
		}
	}
	return nil
}

// LoadOptions adjusts Load.
type LoadOptions struct {
	// KeepDType keeps bfloat16/float16 weights in their dtype, so activations run in it
	// too, as in mlx-lm: half the memory on MLX. By default float weights become
	// float32: the cpu backend computes and stores float32 anyway, and float32
	// activations avoid rounding every intermediate to 8 bits of mantissa.
	KeepDType bool
	// DType is the float type weights become when KeepDType is off: Float32 (the
	// zero value), BFloat16 or Float16. Quantized weights stay packed; their scales
	// and biases take this type too, as mlx_lm.convert --dtype casts them.
	//
	// With Float32, a bfloat16 or float16 checkpoint's weight matrices stay at their
	// width on a backend that multiplies them so (mx.Compact: the cpu backend), and
	// are widened as the products read them: half the memory of float32 weights, and
	// decoding streams half the bytes. Activations, norms and biases are float32 as
	// before, and every product equals the widened one up to float32 rounding.
	DType mx.DType
	// WidenWeights widens those matrices to float32 at load instead, as before
	// compact weights: for comparisons, and for code that wants float32 weights.
	WidenWeights bool
	// Int8Decode decodes 4- and 8-bit quantized models on 8-bit activations
	// (Model.SetInt8Decode): faster where the backend has integer kernels, for a small
	// loss of precision. Off, decoding is exact.
	Int8Decode bool
	// Int8Prefill does the same for every product of many rows that no gradient
	// flows through (Model.SetInt8Prefill): a prompt's prefill, scoring.
	Int8Prefill bool
	// BF16Prefill does it on bfloat16 activations for a bfloat16 checkpoint's weights
	// kept at their width (Model.SetBF16Prefill).
	BF16Prefill bool
}

// DTypeNames are the spellings ParseDType accepts, for help texts.
const DTypeNames = "float32, bfloat16, float16 or auto (the checkpoint's own)"

// ParseDType reads a --dtype value: "float32" (also ""), "bfloat16", "float16",
// or "auto", the checkpoint's own types (KeepDType), which is what mlx-lm
// computes in.
func ParseDType(s string) (LoadOptions, error) {
	switch s {
	case "", "float32":
		return LoadOptions{}, nil
	case "bfloat16":
		return LoadOptions{DType: mx.BFloat16}, nil
	case "float16":
		return LoadOptions{DType: mx.Float16}, nil
	case "auto":
		return LoadOptions{KeepDType: true}, nil
	}
	return LoadOptions{}, fmt.Errorf("inference: dtype %q: want %s", s, DTypeNames)
}

// String is the --dtype spelling of o.
func (o LoadOptions) String() string {
	if o.KeepDType {
		return "auto"
	}
	return o.DType.String()
}

// Load reads a Hugging Face or mlx-community model folder: config.json and
// model.safetensors (or shards with an index), dense or quantized.
func Load(dir string, b mx.Backend) (*Model, error) { return LoadWithOptions(dir, b, LoadOptions{}) }

// LoadWithOptions is Load with options.
func LoadWithOptions(dir string, b mx.Backend, opts LoadOptions) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	defer set.Close()
	_, hasHead := set.Info("lm_head.weight")
	m, err := build(cfg, b, hasHead)
	if err != nil {
		return nil, err
	}
	if !opts.KeepDType && !opts.DType.IsFloat() {
		return nil, fmt.Errorf("inference: load dtype %s is not a float type", opts.DType)
	}
	src := &dirSource{set: set, dir: dir, b: b, keep: opts.KeepDType, dtype: opts.DType}
	_, compacts := b.(mx.Compacter)
	src.compact = compacts && !opts.KeepDType && opts.DType == mx.Float32 && !opts.WidenWeights
	src.quant = m.cfg.Quantization
	bd := newBinder(src, &m.cfg)
	if err := m.bind(bd); err != nil {
		return nil, err
	}
	if src.compact { // float32 activations, whatever the table's dtype
		m.Embed.dtype = mx.Float32
	}
	var extra []string
	for _, n := range set.Names() {
		if !bd.used[n] && !strings.HasSuffix(n, "rotary_emb.inv_freq") {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		// The names come from the file: quoted, so a name holding escape
		// sequences cannot act on the terminal that prints the warning.
		quoted := make([]string, len(extra))
		for i, n := range extra {
			quoted[i] = strconv.Quote(n)
		}
		m.warnings = append(m.warnings, fmt.Sprintf("%d tensors in %s are not used by %q: %s",
			len(extra), dir, cfg.ModelType, summarize(quoted, 8)))
	}
	m.SetInt8Decode(opts.Int8Decode)
	m.SetInt8Prefill(opts.Int8Prefill)
	m.SetBF16Prefill(opts.BF16Prefill)
	return m, nil
}

func summarize(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(", and %d more", len(names)-n)
}

// NewRandom makes a model with random weights (see randomSource) for tests and
// benchmarks. When cfg.Quantization is set, every layer mlx-lm would quantize is
// quantized with it. It panics on an invalid config.
func NewRandom(cfg Config, seed uint64, b mx.Backend) *Model {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	q := cfg.Quantization
	cfg.Quantization = nil
	m, err := build(cfg, b, !cfg.TieWordEmbeddings)
	if err == nil {
		err = m.bind(newBinder(randomSource{b: b, seed: seed}, &m.cfg))
	}
	if err == nil && q != nil {
		err = m.quantize(q)
	}
	if err != nil {
		panic(err)
	}
	return m
}

// CompactWeights rounds m's float weight matrices (its linear layers' and its
// embedding's, and their quantized scales and biases where the backend reads those
// compact, not the norms or a linear layer's bias vector) to dt, bfloat16 or float16,
// and keeps them compact (mx.Compact), with the activations as they were: what a
// float32 load of a 16-bit checkpoint gives (LoadOptions.DType). Benchmarks and tests
// use it on random models.
func (m *Model) CompactWeights(dt mx.DType) error {
	if dt != mx.BFloat16 && dt != mx.Float16 {
		return fmt.Errorf("inference: compact weights in %s: want bfloat16 or float16", dt)
	}
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	var err error
	m.slots(func(name string, slot **mx.Array) {
		if a := *slot; err == nil && a.DType().IsFloat() && keptCompact(name, a.Ndim(), m.cfg.Quantization, m.b) {
			c := mx.Compact(mx.AsType(a, dt))
			if err = c.Err(); err == nil {
				*slot = c
			}
		}
	})
	return err
}

// SetInt8Decode chooses how a decode step multiplies by 4- and 8-bit quantized
// weights. Off (the default), exactly, as mlx-lm does. On, each step's
// activations are rounded to int8 and multiplied by the packed weights as
// integers (mx.QuantizedMatmulA8), as llama.cpp decodes its quantized models:
// about twice the weights a second where the backend has integer kernels (the
// cpu backend on x86-64: 4 bits with AVX2, 8 bits with AVX-512 VNNI), for a
// small loss of precision (TestInt8DecodePerplexity). It covers every product
// of one row (a prefill's output projection for its last position too); many
// rows at once are SetInt8Prefill's choice, and training, whose gradients flow
// through the products, stays exact, as does every product on a backend or CPU
// without such a kernel. The model and every copy made from it (WithParams,
// Fork: a chat's, a test-time-training step's) share the choice, before the
// call or after: an open chat switches at its next step.
func (m *Model) SetInt8Decode(on bool) { m.act.decode.Store(on) }

// SetInt8Prefill is SetInt8Decode for products of many rows no gradient flows
// through: a prompt's prefill, and scoring (a decision's options, a validation
// loss). Each row is rounded alone, as a decode step's row is, so a position's
// result does not depend on the rows beside it. Where the backend has kernels
// for many rows (the cpu backend with AVX-512 VNNI: two to three times dequantized sgemm's
// speed on Qwen3-0.6B's products, BenchmarkMatMulTInt8) a prompt reads that
// much faster, for the same kind of loss as decoding's
// (TestRoundedPrefillPerplexity). Shared as SetInt8Decode's choice is.
func (m *Model) SetInt8Prefill(on bool) { m.act.prefill.Store(on) }

// SetBF16Prefill is SetInt8Prefill for the bfloat16 weight matrices a float32 load of a
// bfloat16 checkpoint keeps at their width (LoadOptions.DType): every product of many
// rows no gradient flows through rounds its activations to bfloat16 and multiplies them
// by the weights in pairs (mx.MatmulTBF16), as llama.cpp multiplies its 16-bit weights.
// Products of two bfloat16 values are exact, so only the rounding of the activations
// differs: each value moves by at most 2⁻⁹ of itself. Where the backend has the kernel
// (the cpu backend on CPUs with AVX-512 BF16: about twice the widened tiles' speed on
// Qwen3-0.6B's products, BenchmarkHalfMatMulTBF16) a prompt reads that much faster, for
// a small loss (TestRoundedPrefillPerplexity). One row (a decode step) stays exact, as
// does every product elsewhere. Shared as SetInt8Decode's choice is.
func (m *Model) SetBF16Prefill(on bool) { m.act.bf16.Store(on) }

// actChoice is a model's choices of products on rounded activations: on 8 bits for
// one row (SetInt8Decode) and for many (SetInt8Prefill), on bfloat16 for many
// (SetBF16Prefill).
type actChoice struct{ decode, prefill, bf16 atomic.Bool }

// rows reports whether x holds more than one row (a prompt, not a decode step).
func rows(x *mx.Array) bool { return x.Ndim() > 0 && x.Size() != x.Dim(x.Ndim()-1) }

// takes reports whether a product of x by quantized weights is chosen to take 8-bit
// activations.
func (c *actChoice) takes(x *mx.Array) bool {
	if rows(x) {
		return c.prefill.Load()
	}
	return c.decode.Load()
}

// takesBF16 reports whether a product of x by 16-bit weights is chosen to take
// bfloat16 activations (never for a layer outside a model, which has no choices).
func (c *actChoice) takesBF16(x *mx.Array) bool { return c != nil && rows(x) && c.bf16.Load() }

// shareAct makes c m's choice and every linear layer's and the embedding's.
func (m *Model) shareAct(c *actChoice) {
	m.act = c
	_ = m.forEachModule(func(_ string, mod any) error {
		switch l := mod.(type) {
		case *Linear:
			l.act = c
		case *Embedding:
			l.act = c
		}
		return nil
	})
}

// actRuns reports whether a decode step (decode) and a prompt's prefill (prefill)
// take the integer kernels, and whether a prefill takes bfloat16 activations (bf16):
// the choice is on and some layer (a linear one, or the embedding where it is the
// output projection) is quantized to bits the backend multiplies so, one row or many,
// or is a bfloat16 matrix it multiplies in pairs. One walk over the modules serves all
// three, and none where no choice is on.
func (m *Model) actRuns() (decode, prefill, bf16 bool) {
	d, p, h := m.act.decode.Load(), m.act.prefill.Load(), m.act.bf16.Load()
	if !d && !p && !h {
		return false, false, false
	}
	_ = m.forEachModule(func(_ string, mod any) error {
		var w *mx.Array
		bits := 0
		switch l := mod.(type) {
		case *Linear:
			w = l.Weight
			if l.quantized() {
				bits = l.Bits
			}
		case *Embedding:
			if m.LMHead == nil {
				w = l.Weight
				if l.quantized() {
					bits = l.Bits
				}
			}
		}
		if bits > 0 {
			decode = decode || d && mx.HasQuantizedA8(m.b, bits)
			prefill = prefill || p && mx.HasQuantizedA8Rows(m.b, bits)
		} else if w != nil {
			bf16 = bf16 || h && mx.TakesBF16Rows(w)
		}
		return nil
	})
	return decode, prefill, bf16
}

// Int8Decode reports SetInt8Decode's choice.
func (m *Model) Int8Decode() bool { return m.act.decode.Load() }

// Int8Prefill reports SetInt8Prefill's choice.
func (m *Model) Int8Prefill() bool { return m.act.prefill.Load() }

// BF16Prefill reports SetBF16Prefill's choice.
func (m *Model) BF16Prefill() bool { return m.act.bf16.Load() }

// keptCompact reports whether a checkpoint tensor of ndim dimensions is what a
// float32 load on b keeps compact: a weight matrix (a linear layer's or an embedding
// table), and a quantized matrix's scales or biases where b's decoding kernels read
// them at their 16-bit width for that matrix's bits (mx.ReadsCompactScales, q giving
// the bits); a bfloat16 checkpoint's 4-bit layers then stream 4.5 bits a weight, not 5.
func keptCompact(name string, ndim int, q *Quantization, b mx.Backend) bool {
	if ndim != 2 {
		return false
	}
	if strings.HasSuffix(name, ".weight") {
		return true
	}
	path, ok := strings.CutSuffix(name, ".scales")
	if !ok {
		path, ok = strings.CutSuffix(name, ".biases")
	}
	if !ok || q == nil {
		return false
	}
	alts := q.alternatives(path)
	for _, p := range alts {
		if !mx.ReadsCompactScales(b, p.Bits) {
			return false
		}
	}
	return len(alts) > 0
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// Backend returns the backend the weights live on.
func (m *Model) Backend() mx.Backend { return m.b }

// Warnings lists what Load noticed but tolerated (unused tensors).
func (m *Model) Warnings() []string { return slices.Clone(m.warnings) }

// Params returns every weight by its checkpoint name. The arrays are the model's
// own; training builds a variant with WithParams rather than changing them.
func (m *Model) Params() map[string]*mx.Array {
	out := map[string]*mx.Array{}
	m.slots(func(name string, slot **mx.Array) { out[name] = *slot })
	return out
}

func (m *Model) slots(add func(name string, slot **mx.Array)) {
	slots("", m, add)
	for i, l := range m.layers {
		slots("model.layers."+strconv.Itoa(i)+".", l, add)
	}
}

// WithParams returns a model that shares m's configuration but uses the given
// arrays for the names present in params (same shapes and dtypes as m's own), and
// m's weights for the rest. It is how ValueAndGrad differentiates through the model.
// The copy starts with m's adapter stack and version, and keeps no history; see Fork.
func (m *Model) WithParams(params map[string]*mx.Array) (*Model, error) {
	m.ad.mu.RLock()
	defer m.ad.mu.RUnlock()
	cp, err := build(m.cfg, m.b, !m.cfg.TieWordEmbeddings)
	if err != nil {
		return nil, err
	}
	src := mapSource(m.Params())
	for name, a := range params {
		old, ok := src[name]
		if !ok {
			return nil, fmt.Errorf("inference: WithParams: the model has no tensor %s", name)
		}
		if !slices.Equal(old.Shape(), a.Shape()) {
			return nil, fmt.Errorf("%w: WithParams: %s has shape %v, want %v", ErrTensorShape, name, a.Shape(), old.Shape())
		}
		src[name] = a
	}
	if err := cp.bind(newBinder(src, &cp.cfg)); err != nil {
		return nil, err
	}
	// The activations' dtype is the model's, not its table's: a compact 16-bit
	// table under float32 activations (LoadOptions.DType).
	cp.Embed.dtype = m.Embed.dtype
	cp.shareAct(m.act)
	// Adapters are not weights of the base model; they ride along unchanged.
	st := m.adapterState()
	cp.ad.keep, cp.ad.history = 0, nil
	cp.setLinearAdapters(st.stack)
	cp.ad.state.Store(&AdapterState{Version: st.Version, stack: st.stack})
	return cp, nil
}

// Tokens makes the (B, L) Int32 array Forward takes; every row must be as long.
func (m *Model) Tokens(ids ...[]int) (*mx.Array, error) {
	if len(ids) == 0 || len(ids[0]) == 0 {
		return nil, errors.New("inference: no tokens")
	}
	l := len(ids[0])
	data := make([]int32, 0, len(ids)*l)
	for i, row := range ids {
		if len(row) != l {
			return nil, fmt.Errorf("inference: token row %d has %d ids, row 0 has %d", i, len(row), l)
		}
		for _, t := range row {
			if t < 0 || t >= m.cfg.VocabSize {
				return nil, fmt.Errorf("inference: token id %d outside the vocabulary (%d)", t, m.cfg.VocabSize)
			}
			data = append(data, int32(t))
		}
	}
	a := mx.FromData(m.b, mx.Int32, data, len(ids), l)
	return a, a.Err()
}

// Hidden runs the layers on tokens (B, L) and returns the final hidden states
// (B, L, hidden) before the final norm, appending to cache when it is not nil.
func (m *Model) hidden(tokens *mx.Array, cache *Cache) *mx.Array {
	return m.hiddenWith(tokens, cache, false, false)
}

// hiddenWith is hidden, with each block under mx.Checkpoint when checkpoint
// is set and there is no cache (a training step), and each block's output
// queued (mx.AsyncEval) as soon as it is built when stage is set (a decoding
// step where stagesSteps holds; never inside a transform, which must not
// evaluate).
func (m *Model) hiddenWith(tokens *mx.Array, cache *Cache, checkpoint, stage bool) *mx.Array {
	if err := tokens.Err(); err != nil {
		return tokens
	}
	if tokens.Ndim() != 2 || tokens.DType() != mx.Int32 {
		return mx.Errorf("inference: tokens must be (B, L) int32, got %s", tokens)
	}
	if cache != nil && len(cache.layers) != len(m.layers) {
		return mx.Errorf("inference: cache has %d layers, model %d", len(cache.layers), len(m.layers))
	}
	if p := m.cfg.MaxPositionEmbeddings; p > 0 && cache.Len()+tokens.Dim(1) > p {
		return mx.Errorf("inference: %d positions exceed max_position_embeddings %d", cache.Len()+tokens.Dim(1), p)
	}
	start := cache.Len()
	h := m.Embed.Forward(tokens)
	for i, blk := range m.layers {
		if h.Err() != nil {
			break
		}
		if checkpoint && cache == nil {
			h = mx.Checkpoint(func(x *mx.Array) *mx.Array { return blk.Forward(x, nil) }, h)
			continue
		}
		if cache != nil && cache.keepAt == i && i > 0 {
			cache.keep(h)
		}
		h = blk.Forward(h, cache.layer(i))
		if stage && h.Err() == nil {
			if err := mx.AsyncEval(h); err != nil {
				h = mx.ErrorArray(fmt.Errorf("inference: block %d: %w", i, err))
			}
		}
	}
	if h.Err() != nil {
		cache.Trim(start) // the layers before the failure advanced; keep the cache consistent
	}
	return h
}

// head is the final norm and the output projection.
func (m *Model) head(h *mx.Array) *mx.Array {
	h = m.Norm.Forward(h)
	if m.LMHead != nil {
		return m.LMHead.Forward(h)
	}
	return m.Embed.AsLinear(h)
}

// Forward returns the logits (B, L, vocab) for tokens (B, L) Int32, continuing from
// what cache holds and appending to it (a nil cache starts from position 0 and keeps
// nothing). Errors travel in the returned array, as with every mlxbridge op.
func (m *Model) Forward(tokens *mx.Array, cache *Cache) *mx.Array {
	h := m.hidden(tokens, cache)
	if h.Err() != nil {
		return h
	}
	return m.head(h)
}

// ForwardLast is Forward for decoding: only the last position's logits (B, vocab)
// are computed, so a prefill of L tokens projects one row onto the vocabulary, not L.
func (m *Model) ForwardLast(tokens *mx.Array, cache *Cache) *mx.Array {
	return m.forwardLast(tokens, cache, false)
}

// forwardLast is ForwardLast, with hiddenWith's stage.
func (m *Model) forwardLast(tokens *mx.Array, cache *Cache, stage bool) *mx.Array {
	h := m.hiddenWith(tokens, cache, false, stage)
	if h.Err() != nil {
		return h
	}
	l := h.Dim(1)
	last := mx.SliceAxis(h, 1, l-1, l)
	return mx.Squeeze(m.head(last), 1)
}

// Prefix runs tokens (B, L) through the embedding and blocks [0, k) from
// position 0, with no cache, and returns the hidden states (B, L, hidden) there.
// With Suffix it is Forward cut in two: a learner whose adapters sit only in
// blocks k and above computes the prefix of its examples once and steps through
// the suffix alone.
func (m *Model) Prefix(tokens *mx.Array, k int) *mx.Array {
	if k < 0 || k > len(m.layers) {
		return mx.Errorf("inference: prefix of %d blocks, model has %d", k, len(m.layers))
	}
	if err := tokens.Err(); err != nil {
		return tokens
	}
	if tokens.Ndim() != 2 || tokens.DType() != mx.Int32 {
		return mx.Errorf("inference: tokens must be (B, L) int32, got %s", tokens)
	}
	if p := m.cfg.MaxPositionEmbeddings; p > 0 && tokens.Dim(1) > p {
		return mx.Errorf("inference: %d positions exceed max_position_embeddings %d", tokens.Dim(1), p)
	}
	h := m.Embed.Forward(tokens)
	for _, blk := range m.layers[:k] {
		if h.Err() != nil {
			break
		}
		h = blk.Forward(h, nil)
	}
	return h
}

// Suffix continues a Prefix: blocks [k, n) over all of h's positions, then the
// head over positions from and after only, returning their logits
// (B, L−from, vocab).
func (m *Model) Suffix(h *mx.Array, k, from int) *mx.Array {
	if k < 0 || k > len(m.layers) {
		return mx.Errorf("inference: suffix from block %d, model has %d", k, len(m.layers))
	}
	if err := h.Err(); err != nil {
		return h
	}
	if h.Ndim() != 3 || from < 0 || from >= h.Dim(1) {
		return mx.Errorf("inference: suffix of %s from position %d", h, from)
	}
	for _, blk := range m.layers[k:] {
		if h.Err() != nil {
			return h
		}
		h = blk.Forward(h, nil)
	}
	return m.head(mx.SliceAxis(h, 1, from, h.Dim(1)))
}

// SuffixRows is Suffix for rows of different lengths in one batch: blocks
// [k, n) over all of h's positions (B, L, hidden; causal, so a row padded at its
// end reads nothing of the padding), then the head over the listed positions
// only, rows[i] = b·L + t, returning their logits (len(rows), vocab).
func (m *Model) SuffixRows(h *mx.Array, k int, rows []int32) *mx.Array {
	x := m.suffixHidden(h, k, rows)
	if x.Err() != nil {
		return x
	}
	return m.head(x)
}

// SuffixLoss is Σ weights[i] · cross-entropy(logits of rows[i], targets[i])
// over SuffixRows' positions. Past one chunk of positions (LossChunkBytes of
// logits) it is computed as Loss computes its own, the head and cross-entropy
// a chunk at a time, each recomputed in the backward pass, so the logits of
// every listed position are never held at once; within one chunk it is
// computed directly (the same peak, without the recomputation).
func (m *Model) SuffixLoss(h *mx.Array, k int, rows, targets []int32, weights []float32) *mx.Array {
	if len(targets) != len(rows) || len(weights) != len(rows) {
		return mx.Errorf("inference: suffix loss of %d positions with %d targets and %d weights", len(rows), len(targets), len(weights))
	}
	x := m.suffixHidden(h, k, rows)
	if x.Err() != nil {
		return x
	}
	if len(rows) <= m.lossChunk(0) {
		t, wt := m.targets(targets, weights)
		return m.weightedCE(x, t, wt)
	}
	return m.chunkedLoss(x, targets, weights, 0)
}

// suffixHidden is SuffixRows up to the head: the hidden states of the rows.
func (m *Model) suffixHidden(h *mx.Array, k int, rows []int32) *mx.Array {
	if k < 0 || k > len(m.layers) {
		return mx.Errorf("inference: suffix from block %d, model has %d", k, len(m.layers))
	}
	if err := h.Err(); err != nil {
		return h
	}
	if h.Ndim() != 3 || len(rows) == 0 {
		return mx.Errorf("inference: suffix of %s at %d positions", h, len(rows))
	}
	n := h.Dim(0) * h.Dim(1)
	for _, r := range rows {
		if r < 0 || int(r) >= n {
			return mx.Errorf("inference: suffix of %s at position %d", h, r)
		}
	}
	for _, blk := range m.layers[k:] {
		if h.Err() != nil {
			return h
		}
		h = blk.Forward(h, nil)
	}
	flat := mx.Reshape(h, n, h.Dim(2))
	return mx.Take(flat, mx.FromData(m.b, mx.Int32, rows, len(rows)), 0)
}

// Blocks is the number of transformer blocks.
func (m *Model) Blocks() int { return len(m.layers) }

// Hidden returns the normalized final hidden states (B, L, hidden): the features a
// decision head reads.
func (m *Model) Hidden(tokens *mx.Array, cache *Cache) *mx.Array {
	h := m.hidden(tokens, cache)
	if h.Err() != nil {
		return h
	}
	return m.Norm.Forward(h)
}

// WeightBytes is the size of the weights in their storage dtype (on the cpu backend,
// bf16/f16 arrays are held as float32 regardless; this counts what the dtype says).
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, a := range m.Params() {
		n += a.Nbytes()
	}
	return n
}

// ParamCount counts m's parameters as mlx-lm does (utils.get_total_parameters,
// which its LoRA banner divides by): a quantized weight counts as the values it
// packs (words·32/bits), its scales and biases not at all; every other tensor,
// norms and layer biases included, by its size. Adapters are not counted.
func (m *Model) ParamCount() int64 {
	var n int64
	count := func(w, bias *mx.Array, bits int) {
		if bits > 0 {
			n += int64(w.Size()) * 32 / int64(bits)
		} else {
			n += int64(w.Size())
		}
		if bias != nil {
			n += int64(bias.Size())
		}
	}
	visit := func(prefix string, v any) {
		walk(prefix, reflect.ValueOf(v), func(_ string, f reflect.Value) error {
			switch mod := f.Interface().(type) {
			case *Linear:
				count(mod.Weight, mod.Bias, mod.Bits*btoi(mod.quantized()))
			case *Embedding:
				count(mod.Weight, nil, mod.Bits*btoi(mod.quantized()))
			case *RMSNorm:
				count(mod.Weight, nil, 0)
			}
			return nil
		})
	}
	visit("", m)
	for i, l := range m.layers {
		visit("model.layers."+strconv.Itoa(i)+".", l)
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SaveModel writes m as a Hugging Face folder: config.json and model.safetensors
// (quantized tensors and the quantization block included).
func SaveModel(m *Model, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("inference: %w", err)
	}
	data, err := m.cfg.JSON()
	if err != nil {
		return fmt.Errorf("inference: config: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.json"), data); err != nil {
		return err
	}
	return mx.SaveSafetensors(filepath.Join(dir, safetensors.SingleFileName), m.Params(), map[string]string{"format": "mlx"})
}

func numCPU() int { return runtime.GOMAXPROCS(0) }
