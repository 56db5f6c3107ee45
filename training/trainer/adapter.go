package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
)

// TrainAdapter trains a LoRA adapter on m over examples, all in memory: no
// files, no checkpoints. It pushes a fresh adapter of the shape opts.LoRA gives
// onto m's adapter stack (those below stay as they are and add their updates),
// starting from opts.Init when set, trains opts.Iters updates and returns the
// trained weights by lora.Params' names. The adapter stays on top of m's stack
// on return; m.PopAdapter discards it. To leave a model that serves a chat
// alone, train m.Fork(). onEvent, when not nil, receives progress on the
// training goroutine. ctx is checked between micro-batches; a cancelled run
// returns the weights of its last finished update with an error wrapping
// ctx.Err().
func TrainAdapter(ctx context.Context, m *inference.Model, examples []data.Example, opts Options, onEvent func(Event)) (map[string]*mx.Array, Result, error) {
	start := time.Now()
	a, err := newAdapterRun(m, examples, opts, onEvent)
	if err != nil {
		return nil, Result{ValLoss: math.NaN(), TestLoss: math.NaN(), TestPerplexity: math.NaN(), TrainLoss: math.NaN()}, err
	}
	err = a.loop(ctx)
	a.res.Duration = time.Since(start)
	if err == nil {
		a.emit(Event{Kind: EventDone, Step: a.res.Steps})
	}
	return a.params, a.res, err
}

// adapterRun is the training loop over LoRA adapters that TrainAdapter and
// Run share.
type adapterRun struct {
	opts    Options
	m       *inference.Model
	onEvent func(Event)
	batcher *data.Batcher
	stepper Stepper
	params  map[string]*mx.Array
	res     Result
	// afterStep, when set, runs after every update; Run saves checkpoints there.
	afterStep func(step int) error
	memory    *MemoryError // the estimate the run was admitted on
	// checkpoint recomputes every block in the backward pass: asked for
	// (Options.GradCheckpoint) or turned on by checkMemory when memory is short.
	checkpoint bool
}

func newAdapterRun(m *inference.Model, examples []data.Example, opts Options, onEvent func(Event)) (*adapterRun, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &adapterRun{m: m, onEvent: onEvent, res: Result{ValLoss: math.NaN(), TestLoss: math.NaN(), TestPerplexity: math.NaN(), TrainLoss: math.NaN()}}
	var err error
	if opts, err = fitModel(m, opts, longestExample(examples), a.info); err != nil {
		return nil, err
	}
	a.batcher, err = data.NewBatcher(examples, data.BatchOptions{
		BatchSize: opts.BatchSize, MaxSeqLen: opts.MaxSeqLength, PadID: opts.PadID, Shuffle: true, Seed: opts.Seed,
	})
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if a.batcher.Len() == 0 {
		return nil, fmt.Errorf("trainer: %w: nothing to train on after cutting to %d tokens", data.ErrNoExamples, opts.MaxSeqLength)
	}
	if opts.Epochs > 0 {
		per := a.batcher.Len()
		opts.Iters = (opts.Epochs*per + opts.GradAccumulation - 1) / opts.GradAccumulation
		a.opts = opts
		a.info("%d epochs of %d batches: %d updates", opts.Epochs, per, opts.Iters)
	}
	a.opts = opts
	if tr := a.batcher.Truncation(); tr.Examples > 0 || tr.NoTargets > 0 || tr.TooShort > 0 {
		a.warn("max sequence length %d: %s", opts.MaxSeqLength, tr.String())
	}
	if err := a.checkMemory(m, len(examples)); err != nil { // before the adapters are made
		return nil, err
	}
	if _, err := lora.Apply(m, opts.LoRA); err != nil {
		return nil, err
	}
	a.params = lora.Params(m)
	if opts.Init != nil {
		if err := a.setParams(opts.Init); err != nil {
			m.PopAdapter() // the one just pushed
			return nil, fmt.Errorf("trainer: initial adapter: %w", err)
		}
	}
	// The schedule's cosine spans opts.Iters, known only now with epochs.
	a.stepper = Stepper{Bind: Adapters(m), Optimizer: opts.optimizer(), ClipNorm: opts.ClipGradNorm}
	return a, nil
}

// setParams installs adapter weights for every adapter of the run, as float32.
func (a *adapterRun) setParams(ps map[string]*mx.Array) error {
	if len(ps) != len(a.params) {
		return fmt.Errorf("%d adapter arrays where this run has %d: the LoRA settings differ", len(ps), len(a.params))
	}
	conv := make(map[string]*mx.Array, len(ps))
	for name, p := range ps {
		conv[name] = mx.AsType(p, mx.Float32)
	}
	if err := lora.SetParams(a.m, conv); err != nil {
		return err
	}
	a.params = lora.Params(a.m)
	return nil
}

func (a *adapterRun) emit(ev Event) {
	if a.onEvent == nil {
		return
	}
	ev.Iters = a.opts.Iters
	a.onEvent(ev)
}

func (a *adapterRun) info(format string, args ...any) {
	a.emit(Event{Kind: EventInfo, Message: fmt.Sprintf(format, args...)})
}

func (a *adapterRun) warn(format string, args ...any) {
	a.emit(Event{Kind: EventWarning, Message: fmt.Sprintf(format, args...)})
}

// dropoutSeed keys the dropout masks of one micro-batch, so a resumed run
// draws what an uninterrupted one would.
func dropoutSeed(seed uint64, step, micro int) uint64 {
	return seed*0x9e3779b97f4a7c15 + uint64(step)<<20 + uint64(micro) + 1
}

// withDropout sets LoRA dropout with its own masks before b's loss runs.
func withDropout(b Batch, p float64, seed uint64) Batch {
	loss := b.Loss
	b.Loss = func(m *inference.Model, params map[string]*mx.Array) *mx.Array {
		lora.SetDropout(m, p, seed)
		return loss(m, params)
	}
	return b
}

// evaluate is the token-weighted mean loss over the first n batches of ex
// (all with n < 0), without dropout.
func (a *adapterRun) evaluate(ctx context.Context, ex []data.Example, n int) (float64, error) {
	lora.SetDropout(a.m, 0, 0)
	batches, err := ExampleBatches(ex, data.BatchOptions{BatchSize: a.opts.BatchSize, MaxSeqLen: a.opts.MaxSeqLength, PadID: a.opts.PadID}, n)
	if err != nil {
		return math.NaN(), err
	}
	return a.stepper.Evaluate(ctx, a.params, batches)
}

func stopped(step int, err error) error {
	return fmt.Errorf("trainer: stopped after step %d: %w", step, err)
}

// loop trains from the step after a.res.Steps to a.opts.Iters.
func (a *adapterRun) loop(ctx context.Context) error {
	o := a.opts
	start := a.res.Steps
	if start >= o.Iters {
		a.info("already at step %d of %d", start, o.Iters)
	}
	began := time.Now()
	windowStart := began
	var windowLoss, windowWeight float64
	var windowTokens int64
	for step := start + 1; step <= o.Iters; step++ {
		if err := ctx.Err(); err != nil {
			return stopped(step-1, err)
		}
		batches := make([]Batch, o.GradAccumulation)
		for k := range batches {
			batches[k] = withDropout(NextTokenWith(a.batcher.Next(), inference.LossOptions{CheckpointBlocks: a.checkpoint}), o.LoRA.Dropout, dropoutSeed(o.Seed, step, k))
		}
		sr, err := a.stepper.Step(ctx, a.params, batches)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrNonFinite) {
				return stopped(step-1, err)
			}
			return err
		}
		a.params = sr.Params
		a.res.Steps = step
		a.res.TrainLoss = sr.Loss
		a.res.Tokens += sr.Tokens
		windowLoss += sr.Loss * sr.Weight
		windowWeight += sr.Weight
		windowTokens += sr.Tokens

		if step%o.StepsPerReport == 0 || step == o.Iters {
			now := time.Now()
			el := now.Sub(began)
			eta := time.Duration(float64(el) / float64(step-start) * float64(o.Iters-step))
			_, peak, _ := mx.Memory(a.m.Backend())
			a.emit(Event{Kind: EventTrain, Step: step, Loss: windowLoss / windowWeight, LR: sr.LR,
				TokensPerSec: float64(windowTokens) / max(now.Sub(windowStart).Seconds(), 1e-9), Tokens: a.res.Tokens,
				Elapsed: el, ETA: eta, PeakMemory: peak})
			windowStart, windowLoss, windowWeight, windowTokens = now, 0, 0, 0
		}
		if len(o.Valid) > 0 && o.StepsPerEval > 0 && (step%o.StepsPerEval == 0 || step == o.Iters) {
			v, err := a.evaluate(ctx, o.Valid, o.ValBatches)
			if err != nil {
				if ctx.Err() != nil {
					return stopped(step, err)
				}
				return err
			}
			a.res.ValLoss = v
			a.emit(Event{Kind: EventVal, Step: step, ValLoss: v})
		}
		if a.afterStep != nil {
			if err := a.afterStep(step); err != nil {
				return err
			}
		}
	}
	return nil
}
