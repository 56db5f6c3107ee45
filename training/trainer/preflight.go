package trainer

import (
	"errors"
	"fmt"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
)

// Settings are checked against the model before a run allocates anything of
// its own: a LoRA rank of 10⁹ once died in the runtime ("fatal error: out of
// memory", or a makeslice panic past that) while making the adapters, and a
// batch that cannot fit ran until the system killed it.

// ErrWontFit is matched by the error of a run whose memory estimate exceeds
// what the system has available (see MemoryError). Options.Force and
// Config.Force run it anyway.
var ErrWontFit = errors.New("trainer: the run would not fit in memory")

// MemoryError is a run refused for memory: the estimate and what it was
// estimated for, so a caller can phrase its own advice.
type MemoryError struct {
	Estimate
	Batch, Seq int   // rows per micro-batch and tokens per row, as estimated
	Rank       int   // the LoRA rank
	Adapters   int64 // adapter parameters
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("trainer: this run needs about %s, %s available: weights %s, activations %s (batch %d × %d tokens), "+
		"adapters and optimizer %s (rank %d, %d parameters), reuse headroom %s; "+
		"a smaller batch or sequence length, a lower rank or fewer layers, or a quantized model needs less",
		fmtBytes(e.Total()), fmtBytes(e.Available), fmtBytes(e.Weights), fmtBytes(e.Activations), e.Batch, e.Seq,
		fmtBytes(e.Optimizer), e.Rank, e.Adapters, fmtBytes(e.Headroom))
}

func (e *MemoryError) Is(target error) bool { return target == ErrWontFit }

// Upper bounds on settings no model needs more of; beyond them the counts
// would overflow before any check could see them.
const (
	maxIters     = 1_000_000_000
	maxEpochs    = 1_000_000
	maxGradAccum = 1_000_000
)

// fitModel checks opts against m and returns them with MaxSeqLength cut to
// the positions m reads (say is told when that cuts examples, longest being
// the longest example in tokens). Nothing is allocated.
func fitModel(m *inference.Model, opts Options, longest int, say func(format string, args ...any)) (Options, error) {
	if p := m.ContextLength(); p > 0 && opts.MaxSeqLength > p {
		if longest-1 > p {
			say("max sequence length %d is more than the %d positions this model reads: using %d", opts.MaxSeqLength, p, p)
		}
		opts.MaxSeqLength = p
	}
	_, minDim, minPath, err := adapterSize(m, opts.LoRA)
	if err != nil {
		return opts, err
	}
	if r := opts.LoRA.Rank; r > minDim {
		return opts, fmt.Errorf("trainer: LoRA rank %d is more than the adapted layers allow: the rank must be at most min(in, out) = %d (%s)", r, minDim, minPath)
	}
	return opts, nil
}

// adapterSize counts the parameters of the adapters cfg would make on m, and
// finds the narrowest adapted layer, without making them.
func adapterSize(m *inference.Model, cfg lora.Config) (params int64, minDim int, minPath string, err error) {
	paths, _, err := lora.Targets(m, cfg)
	if err != nil {
		return 0, 0, "", err
	}
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	r := int64(cfg.WithDefaults().Rank)
	minDim = -1
	m.Linears(func(path string, l *inference.Linear) {
		if !want[path] {
			return
		}
		params = satAdd(params, satMul(r, int64(l.In)+int64(l.Out)))
		if d := min(l.In, l.Out); minDim < 0 || d < minDim {
			minDim, minPath = d, fmt.Sprintf("%s: %d → %d", path, l.In, l.Out)
		}
	})
	return params, minDim, minPath, nil
}

// checkMemory estimates the run a describes (over that many examples) and
// refuses it when the system reports less memory available, unless
// opts.Force. The estimate is kept for Run to report.
func (a *adapterRun) checkMemory(m *inference.Model, examples int) error {
	o := a.opts
	if o.Iters > maxIters {
		return fmt.Errorf("trainer: %d updates (%d epochs of %d batches) are more than %d", o.Iters, o.Epochs, a.batcher.Len(), maxIters)
	}
	params, _, _, err := adapterSize(m, o.LoRA)
	if err != nil {
		return err
	}
	// A batch holds at most every example, and a row at most the longest.
	batch := min(o.BatchSize, examples)
	seq := o.MaxSeqLength
	if tr := a.batcher.Truncation(); tr.Longest > 0 && tr.Longest-1 < seq {
		seq = tr.Longest - 1
	}
	if o.GradCheckpoint && !mx.Checkpoints(m.Backend()) {
		a.warn("grad checkpoint: the %s backend keeps what its own autodiff keeps; the run holds what it would without", m.Backend().Name())
	}
	e := EstimateRun(m.Backend(), m.WeightBytes(), m.Config(), batch, seq, params, o.GradCheckpoint)
	a.checkpoint = e.Checkpointed
	a.memory = &MemoryError{Estimate: e, Batch: batch, Seq: seq, Rank: o.LoRA.Rank, Adapters: params}
	if !e.Fits() && !o.Force {
		return a.memory
	}
	return nil
}

// longestExample is the length in tokens of the longest of ex.
func longestExample(ex []data.Example) int {
	n := 0
	for _, e := range ex {
		n = max(n, len(e.Tokens))
	}
	return n
}
