// Package pretrain trains a small decoder-only model from scratch: every
// weight is learned (no adapters) with AdamW, a warmup-then-cosine learning
// rate and global-norm clipping, on next-token prediction over fixed-length
// windows cut from one packed token stream. It is how Inloop's bundled demo
// model is made; runs are short, so there are no checkpoints, and a run is
// reproducible from its seed on one backend.
package pretrain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
	"github.com/inloop/inloop/training/optim"
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

// Progress is reported after every update.
type Progress struct {
	Step, Steps  int
	Loss         float64 // this update's mean next-token loss (nats)
	LR           float64
	TokensPerSec float64 // since the start
	Elapsed      time.Duration
	ETA          time.Duration
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

// Train pretrains a model on stream, the training text's token ids packed end to
// end (documents separated by an end-of-text token). Each update reads
// BatchSize windows of SeqLen+1 tokens at random offsets drawn from Seed. It
// returns the trained model; ctx cancels between updates.
func Train(ctx context.Context, b mx.Backend, cfg Config, stream []int, progress func(Progress)) (*inference.Model, Result, error) {
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

	opt := optim.NewAdamW(optim.WarmupCosine(float32(cfg.LR), cfg.Warmup, cfg.Steps-cfg.Warmup, float32(cfg.MinLR)))
	opt.Beta2 = 0.95
	opt.BiasCorrection = true
	opt.WeightDecay = cfg.WeightDecay
	// Weight decay on matrices only: norms keep their scale. Two optimizers share
	// the schedule, one with decay and one without.
	optNoDecay := optim.NewAdamW(optim.WarmupCosine(float32(cfg.LR), cfg.Warmup, cfg.Steps-cfg.Warmup, float32(cfg.MinLR)))
	optNoDecay.Beta2 = 0.95
	optNoDecay.BiasCorrection = true
	optNoDecay.WeightDecay = 0

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	L, B := cfg.SeqLen, cfg.BatchSize
	ids := make([]int32, B*L)
	tgt := make([]int32, B*L)
	mask := make([]float32, B*L)
	for i := range mask {
		mask[i] = 1
	}
	names, _ := optim.Flatten(params)
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
				ids[r*L+j] = int32(stream[off+j])
				tgt[r*L+j] = int32(stream[off+j+1])
			}
		}
		x := mx.FromData(b, mx.Int32, ids, B, L)
		y := mx.FromData(b, mx.Int32, tgt, B, L)
		w := mx.FromData(b, mx.Float32, mask, B, L)
		_, xs := optim.Flatten(params)
		outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			mm, err := m.WithParams(optim.Unflatten(names, p))
			if err != nil {
				return []*mx.Array{mx.Errorf("%v", err)}
			}
			return []*mx.Array{mx.CrossEntropyMasked(mm.Forward(x, nil), y, w)}
		}, xs)
		if err != nil {
			return nil, res, err
		}
		loss, err := outs[0].Item()
		if err != nil {
			return nil, res, err
		}
		if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
			return nil, res, fmt.Errorf("pretrain: loss is %v at step %d; try a lower learning rate", loss, step)
		}
		grads := optim.Unflatten(names, gs)
		if cfg.ClipNorm > 0 {
			grads, _ = optim.ClipGlobalNorm(grads, float32(cfg.ClipNorm))
		}
		decay, noDecay := map[string]*mx.Array{}, map[string]*mx.Array{}
		gDecay, gNoDecay := map[string]*mx.Array{}, map[string]*mx.Array{}
		for n, p := range params {
			if p.Ndim() >= 2 {
				decay[n], gDecay[n] = p, grads[n]
			} else {
				noDecay[n], gNoDecay[n] = p, grads[n]
			}
		}
		lr := opt.LearningRate()
		next, err := opt.Step(decay, gDecay)
		if err != nil {
			return nil, res, err
		}
		if len(noDecay) > 0 {
			n2, err := optNoDecay.Step(noDecay, gNoDecay)
			if err != nil {
				return nil, res, err
			}
			for n, p := range n2 {
				next[n] = p
			}
		}
		vals := make([]*mx.Array, 0, len(next))
		for _, p := range next {
			vals = append(vals, p)
		}
		if err := mx.Eval(vals...); err != nil {
			return nil, res, err
		}
		params = next
		if step == 1 {
			res.FirstLoss = float64(loss)
		}
		if step > cfg.Steps-tailN {
			tail = append(tail, float64(loss))
		}
		res.Steps = step
		res.Tokens += int64(B * L)
		if progress != nil {
			el := time.Since(start)
			progress(Progress{Step: step, Steps: cfg.Steps, Loss: float64(loss), LR: float64(lr),
				TokensPerSec: float64(res.Tokens) / max(el.Seconds(), 1e-9), Elapsed: el,
				ETA: time.Duration(float64(el) / float64(step) * float64(cfg.Steps-step))})
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
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return err
	}
	arrays := map[string]*mx.Array{}
	for n, p := range m.Params() {
		arrays[n] = mx.AsType(p, dtype)
	}
	return mx.SaveSafetensors(filepath.Join(dir, safetensors.SingleFileName), arrays, map[string]string{"format": "mlx"})
}
