// Package deltamem is δ-mem ("δ-mem: Efficient Online Memory for Large Language
// Models", arXiv 2605.12357): an online memory that a frozen model reads and
// writes while it processes a conversation, so what was said before the KV cache
// lost it can still steer the answer, without a token added to the context.
//
// Each attention layer gets a small associative state S (Rank×Rank, 8×8 by
// default), one per chat session. From the layer's normalized input x_t it
// projects, in one product, a key, a value, a query and two gates:
//
//	k_t = norm(W_k x_{t-1})   v_t = W_v x_t   q_t = norm(W_q x_t)
//	α_t = σ(W_α x_t + b_α)    β_t = σ(W_β x_t + b_β)          (per row of S)
//	r_t = S q_t                                   read before write
//	S  ← α_t⊙S − β_t⊙(S k_t)k_tᵀ + β_t⊙(v_t k_tᵀ)  the gated delta rule
//	q' = q + U_q r_t   o' = attention(q') + U_o r_t
//
// The key of position t is projected from the position before it (the token
// shift of DeltaNet's short convolution): a write stores "after this context
// came this", and a later read from the same context finds what came next.
// U_q and U_o start at zero, so an untrained memory changes nothing, bit for bit.
//
// The projections, gates and corrections (Memory) are trained offline with the
// shared training step (Train) on a recall task built from documents, and saved
// as a small safetensors file beside the model. At chat time no gradient runs:
// Attach installs the memory in a session's KV cache (inference.AttentionHook)
// and only the State changes as the session reads and writes tokens.
package deltamem

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// FileName is the memory's file in the model's folder.
const FileName = "deltamem.safetensors"

// DefaultRank is the side of each layer's state S.
const DefaultRank = 8

// Initial gate biases: α ≈ 0.998 (the state keeps what it holds for hundreds of
// tokens unless the gate learns to forget) and β ≈ 0.27 (a write moves a row a
// quarter of the way to the new value).
const (
	initAlphaBias = 6
	initBetaBias  = -1
	normEps       = 1e-6 // in the key and query norms: a zero key writes nothing
)

// Config shapes a memory.
type Config struct {
	Rank int // side of S; 0: DefaultRank
	// Layers lists the layers that get a memory; empty: all of them.
	Layers []int
}

// Memory is the trained part of δ-mem for one model: per layer, the projection
// of the hidden state to key, value, query and gates, and the two corrections.
// It holds no session state (see State); one Memory serves every chat of its
// model. Its arrays are never changed in place: training makes new Memories.
type Memory struct {
	rank   int
	layers []int // model layers with a memory, ascending
	hidden int   // the model's hidden size
	qdim   int   // heads · head_dim of the attention query
	heads  int
	headD  int
	nLay   int // the model's layer count
	params map[string]*mx.Array
}

// Parameter names, per memory layer i (the model layer Layers()[i]):
//
//	layers.<l>.proj       (hidden, 5·rank)  columns: key | value | query | α | β
//	layers.<l>.proj_bias  (5·rank)
//	layers.<l>.query_out  (rank, heads·head_dim)  U_q, zero at first
//	layers.<l>.attn_out   (rank, heads·head_dim)  U_o, zero at first
func paramName(layer int, what string) string {
	return "layers." + strconv.Itoa(layer) + "." + what
}

var paramKinds = []string{"proj", "proj_bias", "query_out", "attn_out"}

// New makes an untrained memory for m: random projections (the query's equal to
// the key's, so a read looks where a write went), the gate biases above, and
// zero corrections, so that the model computes exactly what it did without it.
func New(m *inference.Model, cfg Config, seed uint64) (*Memory, error) {
	mem, err := shape(m, cfg)
	if err != nil {
		return nil, err
	}
	b, r := m.Backend(), mem.rank
	rng := rand.New(rand.NewPCG(seed, 0xde17a))
	std := 1 / math.Sqrt(float64(mem.hidden))
	for _, l := range mem.layers {
		proj := make([]float32, mem.hidden*5*r) // (hidden, 5r) row-major
		for h := 0; h < mem.hidden; h++ {
			row := proj[h*5*r : (h+1)*5*r]
			for j := 0; j < r; j++ {
				row[j] = float32(rng.NormFloat64() * std)   // key
				row[r+j] = float32(rng.NormFloat64() * std) // value
				row[2*r+j] = row[j]                         // query = key
				// The gates start from their biases alone.
			}
		}
		bias := make([]float32, 5*r)
		for j := 0; j < r; j++ {
			bias[3*r+j], bias[4*r+j] = initAlphaBias, initBetaBias
		}
		mem.params[paramName(l, "proj")] = mx.FromData(b, mx.Float32, proj, mem.hidden, 5*r)
		mem.params[paramName(l, "proj_bias")] = mx.FromData(b, mx.Float32, bias, 5*r)
		mem.params[paramName(l, "query_out")] = mx.Full(b, []int{r, mem.qdim}, 0, mx.Float32)
		mem.params[paramName(l, "attn_out")] = mx.Full(b, []int{r, mem.qdim}, 0, mx.Float32)
	}
	if err := mx.Eval(slices.Collect(maps.Values(mem.params))...); err != nil {
		return nil, fmt.Errorf("deltamem: %w", err)
	}
	return mem, nil
}

// shape checks cfg against m and returns an empty memory of that shape.
func shape(m *inference.Model, cfg Config) (*Memory, error) {
	c := m.Config()
	mem := &Memory{rank: cfg.Rank, hidden: c.HiddenSize, heads: c.NumAttentionHeads, headD: c.Head(),
		nLay: c.NumHiddenLayers, params: map[string]*mx.Array{}}
	mem.qdim = mem.heads * mem.headD
	if mem.rank == 0 {
		mem.rank = DefaultRank
	}
	if mem.rank < 1 || mem.rank > 256 {
		return nil, fmt.Errorf("deltamem: rank %d, want 1 to 256", mem.rank)
	}
	if len(cfg.Layers) == 0 {
		for i := range mem.nLay {
			mem.layers = append(mem.layers, i)
		}
	} else {
		mem.layers = slices.Clone(cfg.Layers)
		slices.Sort(mem.layers)
		mem.layers = slices.Compact(mem.layers)
		if mem.layers[0] < 0 || mem.layers[len(mem.layers)-1] >= mem.nLay {
			return nil, fmt.Errorf("deltamem: layers %v: the model has layers 0 to %d", cfg.Layers, mem.nLay-1)
		}
	}
	return mem, nil
}

// Rank is the side of each layer's state.
func (mem *Memory) Rank() int { return mem.rank }

// Layers lists the model layers that have a memory.
func (mem *Memory) Layers() []int { return slices.Clone(mem.layers) }

// Params returns the memory's arrays by name (its own; do not change them).
func (mem *Memory) Params() map[string]*mx.Array { return maps.Clone(mem.params) }

// NumParams is the number of trained numbers.
func (mem *Memory) NumParams() int {
	n := 0
	for _, a := range mem.params {
		n += a.Size()
	}
	return n
}

// WithParams returns a memory of the same shape computing with params (every
// name, same shapes): how training differentiates through it.
func (mem *Memory) WithParams(params map[string]*mx.Array) (*Memory, error) {
	cp := *mem
	cp.layers = slices.Clone(mem.layers)
	cp.params = make(map[string]*mx.Array, len(mem.params))
	for name, old := range mem.params {
		a, ok := params[name]
		if !ok {
			return nil, fmt.Errorf("deltamem: parameter %s missing", name)
		}
		if !slices.Equal(a.Shape(), old.Shape()) {
			return nil, fmt.Errorf("deltamem: parameter %s has shape %v, want %v", name, a.Shape(), old.Shape())
		}
		cp.params[name] = a
	}
	if len(params) != len(mem.params) {
		for name := range params {
			if _, ok := mem.params[name]; !ok {
				return nil, fmt.Errorf("deltamem: unknown parameter %s", name)
			}
		}
	}
	return &cp, nil
}

// Save writes the memory as safetensors (atomically), with its rank and layers
// in the metadata.
func (mem *Memory) Save(path string) error {
	layers := make([]string, len(mem.layers))
	for i, l := range mem.layers {
		layers[i] = strconv.Itoa(l)
	}
	meta := map[string]string{"format": "inloop-deltamem", "version": "1", "rank": strconv.Itoa(mem.rank),
		"layers": strings.Join(layers, ","), "hidden_size": strconv.Itoa(mem.hidden)}
	if err := mx.SaveSafetensors(path, mem.params, meta); err != nil {
		return fmt.Errorf("deltamem: save: %w", err)
	}
	return nil
}

// ErrMismatch reports a memory file made for another model's shape.
var ErrMismatch = errors.New("deltamem: the memory does not fit this model")

// Load reads a memory saved by Save for a model shaped like m, checking every
// tensor's name and shape against what m needs.
func Load(path string, m *inference.Model) (*Memory, error) {
	arrays, meta, err := mx.LoadSafetensors(m.Backend(), path)
	if err != nil {
		return nil, fmt.Errorf("deltamem: load %s: %w", path, err)
	}
	if meta["format"] != "inloop-deltamem" {
		return nil, fmt.Errorf("deltamem: %s is not a δ-mem file (format %q)", path, meta["format"])
	}
	rank, err := strconv.Atoi(meta["rank"])
	if err != nil {
		return nil, fmt.Errorf("deltamem: %s: rank %q", path, meta["rank"])
	}
	var layers []int
	for _, s := range strings.Split(meta["layers"], ",") {
		l, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("deltamem: %s: layers %q", path, meta["layers"])
		}
		layers = append(layers, l)
	}
	if h := meta["hidden_size"]; h != strconv.Itoa(m.Config().HiddenSize) {
		return nil, fmt.Errorf("%w: %s was trained for hidden size %s, the model has %d", ErrMismatch, path, h, m.Config().HiddenSize)
	}
	mem, err := shape(m, Config{Rank: rank, Layers: layers})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMismatch, path, err)
	}
	want := map[string][]int{}
	for _, l := range mem.layers {
		r := mem.rank
		want[paramName(l, "proj")] = []int{mem.hidden, 5 * r}
		want[paramName(l, "proj_bias")] = []int{5 * r}
		want[paramName(l, "query_out")] = []int{r, mem.qdim}
		want[paramName(l, "attn_out")] = []int{r, mem.qdim}
	}
	for name, a := range arrays {
		s, ok := want[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s has an unexpected tensor %q", ErrMismatch, path, name)
		}
		if !slices.Equal(a.Shape(), s) {
			return nil, fmt.Errorf("%w: %s: %s has shape %v, want %v", ErrMismatch, path, name, a.Shape(), s)
		}
		mem.params[name] = mx.AsType(a, mx.Float32)
	}
	for name := range want {
		if _, ok := arrays[name]; !ok {
			return nil, fmt.Errorf("%w: %s lacks %s", ErrMismatch, path, name)
		}
	}
	return mem, nil
}

// check refuses a memory whose shape does not match m.
func (mem *Memory) check(m *inference.Model) error {
	c := m.Config()
	if c.HiddenSize != mem.hidden || c.NumAttentionHeads*c.Head() != mem.qdim || c.NumHiddenLayers != mem.nLay {
		return fmt.Errorf("%w: made for hidden %d, query %d, %d layers; the model has %d, %d, %d", ErrMismatch,
			mem.hidden, mem.qdim, mem.nLay, c.HiddenSize, c.NumAttentionHeads*c.Head(), c.NumHiddenLayers)
	}
	return nil
}

// DefaultPath is where a model's memory lives: beside its weights.
func DefaultPath(modelDir string) string { return filepath.Join(modelDir, FileName) }
