// Package pretrain trains a small decoder-only model from scratch: every
// weight is learned (no adapters) with AdamW, a warmup-then-cosine learning
// rate and global-norm clipping, on next-token prediction over fixed-length
// windows cut from one packed token stream. It is how Inloop's bundled demo
// model is made; runs are short, so there are no checkpoints, and a run is
// reproducible from its seed on one backend. The step itself is the trainer's
// shared Stepper, and progress comes as trainer.Events.
package pretrain

import (
	"context"
	"errors"
	"fmt"
	"github.com/inloop/inloop/internal/atomicfile"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// Config is one pretraining run.
type Config struct {
	Model       inference.Config // architecture; its weights start random (see Init)
	Steps       int              // optimizer updates
	BatchSize   int              // windows per update
	SeqLen      int              // tokens per window (the model also sees the next one as target)
	LR          float64          // peak learning rate
	MinLR       float64          // floor of the cosine decay
	Warmup      int              // linear warmup steps
	WeightDecay float64          // AdamW's decoupled decay on matrices (0: 0.1)
	ClipNorm    float64          // global gradient norm cap; 0: off
	Seed        uint64           // initialization and window order
	InitStd     float64          // standard deviation of the initial weights (0: 0.02)
}

// Result summarizes a run.
type Result struct {
	Steps      int
	Params     int64
	Tokens     int64 // tokens trained on (windows × length)
	FirstLoss  float64
	FinalLoss  float64 // mean over the last 5% of updates
	Duration   time.Duration
	TokPerSec  float64
	StreamSize int
}

func (c *Config) defaults() {
	if c.WeightDecay == 0 {
		c.WeightDecay = 0.1
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
}

func (c *Config) validate(stream int) error {
	switch {
	case c.Steps < 1 || c.BatchSize < 1 || c.SeqLen < 2:
		return fmt.Errorf("pretrain: steps %d, batch size %d and sequence length %d must be positive (length ≥ 2)", c.Steps, c.BatchSize, c.SeqLen)
	case !(c.LR > 0):
		return fmt.Errorf("pretrain: learning rate %g", c.LR)
	case c.Warmup < 0 || c.Warmup >= c.Steps:
		return fmt.Errorf("pretrain: warmup %d must be in [0, steps %d)", c.Warmup, c.Steps)
	case stream < c.SeqLen+1:
		return fmt.Errorf("pretrain: %d tokens is shorter than one window of %d", stream, c.SeqLen+1)
	}
	return c.Model.Validate()
}

// Init returns a model of cfg.Model with GPT-2-style initial weights: normal
// with standard deviation std for embeddings and projections, std/√(2·layers)
// for the projections that write into the residual stream (o_proj,
// down_proj), norms at 1, biases at 0.
func Init(cfg inference.Config, std float64, seed uint64, b mx.Backend) (*inference.Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := inference.NewRandom(cfg, seed, b)
	params := base.Params()
	names := optim.Names(params)
	out := make(map[string]*mx.Array, len(params))
	resid := std / math.Sqrt(2*float64(max(1, cfg.NumHiddenLayers)))
	for i, name := range names {
		p := params[name]
		shape := p.Shape()
		n := p.Size()
		data := make([]float32, n)
		switch {
		case strings.HasSuffix(name, "norm.weight"):
			for j := range data {
				data[j] = 1
			}
		case strings.HasSuffix(name, ".bias"):
		default:
			s := std
			if strings.HasSuffix(name, "o_proj.weight") || strings.HasSuffix(name, "down_proj.weight") {
				s = resid
			}
			rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
			for j := range data {
				data[j] = float32(rng.NormFloat64() * s)
			}
		}
		out[name] = mx.FromData(b, mx.Float32, data, shape...)
	}
	return base.WithParams(out)
}

// ParamCount is the number of weights of m.
func ParamCount(m *inference.Model) int64 {
	var n int64
	for _, p := range m.Params() {
		n += int64(p.Size())
	}
	return n
}

// Run pretrains a model on stream, the training text's token ids packed end to
// end (documents separated by an end-of-text token). Each update reads
// BatchSize windows of SeqLen+1 tokens at random offsets drawn from Seed, and
// takes one step of the trainer's shared Stepper. onEvent, when not nil,
// receives an EventTrain after every update (Loss is that update's) and an
// EventDone at the end. It returns the trained model; ctx is checked between
// updates. A NaN or infinite loss or gradient stops the run with an error
// wrapping trainer.ErrNonFinite.
func Run(ctx context.Context, b mx.Backend, cfg Config, stream []int, onEvent func(trainer.Event)) (*inference.Model, Result, error) {
	cfg.defaults()
	var res Result
	if err := cfg.validate(len(stream)); err != nil {
		return nil, res, err
	}
	for _, t := range stream {
		if t < 0 || t >= cfg.Model.VocabSize {
			return nil, res, fmt.Errorf("pretrain: token id %d outside the vocabulary (%d)", t, cfg.Model.VocabSize)
		}
	}
	m, err := Init(cfg.Model, cfg.InitStd, cfg.Seed, b)
	if err != nil {
		return nil, res, err
	}
	res.Params = ParamCount(m)
	res.StreamSize = len(stream)
	params := m.Params()
	st := trainer.Stepper{Bind: trainer.Weights(m), Optimizer: newOptimizer(cfg), ClipNorm: cfg.ClipNorm}

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	L, B := cfg.SeqLen, cfg.BatchSize
	bt := data.Batch{B: B, L: L,
		IDs:     make([]int32, B*L),   // (B, L)
		Targets: make([]int32, B*L),   // (B, L)
		Mask:    make([]float32, B*L), // (B, L) all learned
		Lengths: make([]int32, B),
	}
	for i := range bt.Mask {
		bt.Mask[i] = 1
	}
	for i := range bt.Lengths {
		bt.Lengths[i] = int32(L)
	}
	start := time.Now()
	var tail []float64
	tailN := max(1, cfg.Steps/20)
	for step := 1; step <= cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return nil, res, fmt.Errorf("pretrain: stopped after step %d: %w", step-1, err)
		}
		for r := 0; r < B; r++ {
			off := rng.IntN(len(stream) - L)
			for j := 0; j < L; j++ {
				bt.IDs[r*L+j] = int32(stream[off+j])
				bt.Targets[r*L+j] = int32(stream[off+j+1])
			}
		}
		sr, err := st.Step(ctx, params, []trainer.Batch{trainer.NextToken(bt)})
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, trainer.ErrNonFinite) {
				return nil, res, fmt.Errorf("pretrain: stopped after step %d: %w", step-1, err)
			}
			return nil, res, fmt.Errorf("pretrain: %w", err)
		}
		params = sr.Params
		if step == 1 {
			res.FirstLoss = sr.Loss
		}
		if step > cfg.Steps-tailN {
			tail = append(tail, sr.Loss)
		}
		res.Steps = step
		res.Tokens += sr.Tokens
		if onEvent != nil {
			el := time.Since(start)
			_, peak, _ := mx.Memory(b)
			onEvent(trainer.Event{Kind: trainer.EventTrain, Step: step, Iters: cfg.Steps, Loss: sr.Loss, LR: sr.LR,
				TokensPerSec: float64(res.Tokens) / max(el.Seconds(), 1e-9), Tokens: res.Tokens, Elapsed: el,
				ETA: time.Duration(float64(el) / float64(step) * float64(cfg.Steps-step)), PeakMemory: peak})
		}
	}
	res.Duration = time.Since(start)
	res.TokPerSec = float64(res.Tokens) / max(res.Duration.Seconds(), 1e-9)
	for _, l := range tail {
		res.FinalLoss += l / float64(len(tail))
	}
	out, err := m.WithParams(params)
	if err != nil {
		return nil, res, err
	}
	if onEvent != nil {
		onEvent(trainer.Event{Kind: trainer.EventDone, Step: res.Steps, Iters: cfg.Steps, Elapsed: res.Duration})
	}
	return out, res, nil
}

// Save writes m as a Hugging Face model folder (config.json and
// model.safetensors) with its weights rounded to dtype (mx.Float32 or
// mx.BFloat16), which config.json's torch_dtype then names.
func Save(m *inference.Model, dir string, dtype mx.DType) error {
	if dtype != mx.Float32 && dtype != mx.BFloat16 {
		return errors.New("pretrain: save as float32 or bfloat16")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := m.Config()
	cfg.TorchDType = "float32"
	if dtype == mx.BFloat16 {
		cfg.TorchDType = "bfloat16"
	}
	raw, err := cfg.JSON()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return err
	}
	arrays := map[string]*mx.Array{}
	for n, p := range m.Params() {
		arrays[n] = mx.AsType(p, dtype)
	}
	return mx.SaveSafetensors(filepath.Join(dir, safetensors.SingleFileName), arrays, map[string]string{"format": "mlx"})
}
