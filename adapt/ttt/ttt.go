// Package ttt is test-time training (Hardt & Sun, arXiv 2305.18466; Akyürek et
// al., arXiv 2411.07279): before the model answers, take a few LoRA steps of
// next-token loss on the prompt's long context and on the chunks of the user's
// documents nearest to it (Index), on a temporary adapter over the user's;
// answer with it; throw it away.
//
// Adapt never changes the model it is given. It trains on m.Fork(): the same
// frozen weights (nothing is copied) with an adapter stack of its own that
// starts as m's. Training sets traced arrays into the adapter for every
// gradient and new weights after every step; on m itself a chat decoding
// meanwhile would see them, or wait on m's adapter lock for a whole step. On
// the fork nothing waits, m's adapter version never moves (so the chat's KV
// cache stays valid for its next turn), and the user's adapter is not merely
// restored afterwards but never touched. The caller answers from a Session of
// Applied.Model() and calls Applied.Done, which pops the temporary adapter.
package ttt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// Defaults, chosen on the bundled demo model and a Qwen3-0.6B-shaped model (see
// BenchmarkStep): a step should cost no more than streaming 20 tokens, and one
// pass over a document should lower the loss of its rest visibly.
const (
	// DefaultLearningRate: on the demo model one pass over a 450-token document
	// takes its held-out continuation from 6.3 to 4.4 nats/token while unrelated
	// text rises 0.2; 3e-3 learns faster but costs unrelated text a whole nat.
	DefaultLearningRate = 1e-3
	DefaultRank         = 8
	// DefaultLayers adapts the last 4 blocks only: the backward pass stops
	// there, so on a deep model a step costs little more than a forward pass.
	DefaultLayers = 4
	// DefaultMaxTokens bounds a piece, and with it a step's time: a step is
	// about a prefill of the piece, which outgrows 20 streamed tokens past
	// ~64 tokens on a Qwen3-0.6B-shaped f32 model on the cpu backend.
	DefaultMaxTokens = 64
	// clipNorm keeps one odd chunk from throwing the adapter far in one step.
	clipNorm = 1.0
)

// ErrNoContext reports context with no piece of at least two tokens to learn
// from.
var ErrNoContext = errors.New("ttt: no context to train on")

// Options steer Adapt. The zero value takes the defaults with the gate off.
type Options struct {
	// Steps is the number of optimizer steps, one piece each, in the order
	// given (nearest first), starting over when there are more steps than
	// pieces; 0 takes one pass over the pieces.
	Steps int
	// LearningRate is Adam's, constant (0: DefaultLearningRate). Adam runs with
	// bias correction: without it the first of a handful of steps would move a
	// third as far.
	LearningRate float64
	Rank         int // LoRA rank; 0: DefaultRank
	// Layers is how many of the last blocks get the temporary adapter (0:
	// DefaultLayers, -1: all).
	Layers int
	// MaxTokens is the longest piece, in predicted positions: a context
	// sequence longer than that is cut into consecutive pieces (0:
	// DefaultMaxTokens; never more than the model's context allows).
	MaxTokens int
	// SkipBelowPerplexity is the gate: when the perplexity of the pieces Adapt
	// would train on is already below it, Adapt trains nothing (0: no gate,
	// and no perplexity is computed).
	SkipBelowPerplexity float64
	Seed                uint64 // initialization of the adapter's lora_a
}

func (o Options) withDefaults(m *inference.Model) Options {
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.Rank == 0 {
		o.Rank = DefaultRank
	}
	if o.Layers == 0 {
		o.Layers = DefaultLayers
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if c := m.ContextLength(); c > 1 && o.MaxTokens > c-1 {
		o.MaxTokens = c - 1
	}
	return o
}

// FirstBlock is the first of a model's blocks (of blocks) the temporary
// adapter covers; 0 when it covers them all. Below it, a model adapted by
// Adapt computes what the model it was given does, so a session of the
// adapted fork can start from the hidden states the model's own session
// kept there (inference.Session.SeedFrom).
func (o Options) FirstBlock(blocks int) int {
	l := o.Layers
	if l == 0 {
		l = DefaultLayers
	}
	if l < 0 || l >= blocks {
		return 0
	}
	return blocks - l
}

func (o Options) validate() error {
	switch {
	case o.Steps < 0:
		return fmt.Errorf("ttt: steps %d", o.Steps)
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0):
		return fmt.Errorf("ttt: learning rate %g", o.LearningRate)
	case o.Rank < 0:
		return fmt.Errorf("ttt: rank %d", o.Rank)
	case o.MaxTokens < 1:
		return fmt.Errorf("ttt: max tokens %d", o.MaxTokens)
	case !(o.SkipBelowPerplexity >= 0):
		return fmt.Errorf("ttt: perplexity gate %g", o.SkipBelowPerplexity)
	}
	return nil
}

// Step is one training step as the user's event log keeps it.
type Step struct {
	Loss   float64 // next-token loss of the step's piece, before the update
	MS     float64 // wall time of the step: forward, backward, update, in milliseconds
	Tokens int64   // tokens the step read
}

// Result is what Adapt did.
type Result struct {
	// Skipped is set when the gate found the context's perplexity below the
	// threshold: nothing was trained and Applied.Model is m itself.
	Skipped bool
	// Perplexity of the pieces trained on (those of the first pass) under m,
	// before training; NaN when the gate is off.
	Perplexity float64
	GateMS     float64 // time the gate's perplexity took
	Pieces     int     // pieces the context was cut into
	Steps      []Step
	// BaseVersion is m's adapter version the temporary adapter was trained
	// over. Adapt does not change m, so m still has it afterwards unless
	// someone else changed m's adapters meanwhile.
	BaseVersion uint64
	TotalMS     float64 // Adapt from call to return, gate and fork included
}

// Applied is a temporary adapter in place: answer from a Session of Model(),
// then call Done.
type Applied struct {
	mu    sync.Mutex
	model *inference.Model   // the fork carrying the adapter, or m when skipped
	top   *inference.Adapter // the trained adapter, top of model's stack; nil when skipped
	done  bool
}

// Model is the model to answer with: m's frozen weights and adapters with the
// temporary adapter on top (m itself when the gate skipped training). After
// Done it computes exactly what m did when Adapt began.
func (a *Applied) Model() *inference.Model { return a.model }

// Adapter is the trained temporary adapter, nil when the gate skipped training:
// for a caller that decides to keep what was learned (save it, push it onto m).
func (a *Applied) Adapter() *inference.Adapter { return a.top }

// Done pops the temporary adapter, leaving Model() with the stack m had when
// Adapt began, bit for bit. Calling it again does nothing. It fails, and pops
// nothing, when someone changed Model()'s adapter stack since Adapt returned.
func (a *Applied) Done() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done || a.top == nil {
		a.done = true
		return nil
	}
	if a.model.TopAdapter() != a.top {
		return errors.New("ttt: done: the adapter stack changed since Adapt; the temporary adapter is not on top")
	}
	if _, _, err := a.model.PopAdapter(); err != nil {
		return fmt.Errorf("ttt: done: %w", err)
	}
	a.done = true
	return nil
}

// Adapt trains a temporary LoRA adapter over m's current adapters on chunks,
// token sequences in the order to learn them (the prompt's context, then the
// nearest indexed chunks, nearest first). Each sequence is cut into pieces of
// at most opts.MaxTokens predictions; each step learns one piece. m is not
// changed (see the package comment): the adapter lives on a fork that Applied
// hands out.
//
// onEvent, when not nil, gets an EventTrain after every step (Loss, Step, Iters,
// Tokens, TokensPerSec, Elapsed, ETA), an EventInfo when the gate skips, and an
// EventDone, on the calling goroutine. ctx is checked before every step; a
// cancelled or failed Adapt leaves nothing pushed anywhere and returns the
// Result so far with the error.
func Adapt(ctx context.Context, m *inference.Model, chunks [][]int, opts Options, onEvent func(trainer.Event)) (_ *Applied, res Result, _ error) {
	began := time.Now()
	res.Perplexity = math.NaN()
	defer func() { res.TotalMS = ms(time.Since(began)) }()
	emit := func(ev trainer.Event) {
		if onEvent != nil {
			ev.Elapsed = time.Since(began)
			onEvent(ev)
		}
	}
	opts = opts.withDefaults(m)
	if err := opts.validate(); err != nil {
		return nil, res, err
	}
	if err := checkTokens(m, chunks); err != nil {
		return nil, res, err
	}
	ps := pieces(chunks, opts.MaxTokens)
	res.Pieces = len(ps)
	if len(ps) == 0 {
		return nil, res, ErrNoContext
	}
	steps := opts.Steps
	if steps == 0 {
		steps = len(ps)
	}
	if err := ctx.Err(); err != nil {
		return nil, res, fmt.Errorf("ttt: stopped before training: %w", err)
	}
	work := m.Fork()
	res.BaseVersion = work.AdapterVersion()
	if forked != nil {
		forked(work)
	}

	if opts.SkipBelowPerplexity > 0 {
		t0 := time.Now()
		ppl, err := perplexity(ctx, work, ps[:min(steps, len(ps))])
		res.GateMS = ms(time.Since(t0))
		if err != nil {
			return nil, res, err
		}
		res.Perplexity = ppl
		if ppl < opts.SkipBelowPerplexity {
			res.Skipped = true
			emit(trainer.Event{Kind: trainer.EventInfo, Message: fmt.Sprintf("ttt: skipped: the context's perplexity %.3g is below the gate %.3g", ppl, opts.SkipBelowPerplexity)})
			emit(trainer.Event{Kind: trainer.EventDone})
			return &Applied{model: m, done: true}, res, nil
		}
	}

	ad, err := newAdapter(work, opts)
	if err != nil {
		return nil, res, err
	}
	if _, err := work.PushAdapter(ad); err != nil {
		return nil, res, fmt.Errorf("ttt: %w", err)
	}
	st := trainer.Stepper{
		Bind:      trainer.Adapters(work),
		Optimizer: newOptimizer(opts.LearningRate),
		ClipNorm:  clipNorm,
	}
	params := lora.Params(work)
	var tokens int64
	loop := time.Now()
	for i := range steps {
		if err := ctx.Err(); err != nil {
			work.PopAdapter()
			return nil, res, fmt.Errorf("ttt: stopped after step %d of %d: %w", i, steps, err)
		}
		p := ps[i%len(ps)]
		t0 := time.Now()
		sr, err := st.Step(ctx, params, []trainer.Batch{trainer.NextToken(batchOf(p))})
		d := time.Since(t0)
		if err != nil {
			work.PopAdapter()
			if ctx.Err() != nil && !errors.Is(err, trainer.ErrNonFinite) {
				return nil, res, fmt.Errorf("ttt: stopped after step %d of %d: %w", i, steps, err)
			}
			return nil, res, fmt.Errorf("ttt: step %d: %w", i+1, err)
		}
		params = sr.Params
		tokens += sr.Tokens
		res.Steps = append(res.Steps, Step{Loss: sr.Loss, MS: ms(d), Tokens: sr.Tokens})
		if onEvent != nil {
			el := time.Since(loop)
			_, peak, _ := mx.Memory(work.Backend())
			emit(trainer.Event{Kind: trainer.EventTrain, Step: i + 1, Iters: steps, Loss: sr.Loss, LR: sr.LR,
				Tokens: tokens, TokensPerSec: float64(sr.Tokens) / max(d.Seconds(), 1e-9),
				ETA: time.Duration(float64(el) / float64(i+1) * float64(steps-i-1)), PeakMemory: peak})
		}
	}
	emit(trainer.Event{Kind: trainer.EventDone, Step: steps, Iters: steps})
	return &Applied{model: work, top: work.TopAdapter()}, res, nil
}

// newAdapter is a fresh LoRA adapter (lora_b zero, so it changes nothing until
// trained) named "ttt", so a stack listing shows what it is.
func newAdapter(m *inference.Model, opts Options) (*inference.Adapter, error) {
	a, _, err := lora.New(m, lora.Config{NumLayers: opts.Layers, Rank: opts.Rank, Seed: opts.Seed, Name: "ttt"})
	if err != nil {
		return nil, fmt.Errorf("ttt: %w", err)
	}
	return a, nil
}

func newOptimizer(lr float64) optim.Optimizer {
	o := optim.NewAdam(optim.Constant(float32(lr)))
	o.BiasCorrection = true
	return o
}

// pieces cuts every sequence into consecutive pieces of at most maxTokens+1
// tokens that overlap by one, so each token after a sequence's first is
// predicted exactly once; pieces under two tokens teach nothing and are left
// out.
func pieces(chunks [][]int, maxTokens int) [][]int {
	var out [][]int
	for _, seq := range chunks {
		for start := 0; start+1 < len(seq); start += maxTokens {
			out = append(out, seq[start:min(start+maxTokens+1, len(seq))])
		}
	}
	return out
}

// batchOf is the one-row next-token batch of a piece: every position learned.
func batchOf(p []int) data.Batch {
	l := len(p) - 1
	bt := data.Batch{B: 1, L: l, IDs: make([]int32, l), Targets: make([]int32, l), Mask: make([]float32, l),
		Lengths: []int32{int32(l)}, Rows: []int{0}}
	for i := range l {
		bt.IDs[i], bt.Targets[i], bt.Mask[i] = int32(p[i]), int32(p[i+1]), 1
	}
	return bt
}

// perplexity is exp of the mean next-token loss over all predictions of ps.
func perplexity(ctx context.Context, m *inference.Model, ps [][]int) (float64, error) {
	var nll float64
	var n int
	for _, p := range ps {
		if err := ctx.Err(); err != nil {
			return math.NaN(), fmt.Errorf("ttt: gate: %w", err)
		}
		ppl, err := inference.Perplexity(m, p, len(p))
		if err != nil {
			return math.NaN(), fmt.Errorf("ttt: gate: %w", err)
		}
		nll += math.Log(ppl) * float64(len(p)-1)
		n += len(p) - 1
	}
	return math.Exp(nll / float64(n)), nil
}

// checkTokens refuses ids outside the vocabulary before anything is computed.
func checkTokens(m *inference.Model, chunks [][]int) error {
	v := m.Config().VocabSize
	for i, seq := range chunks {
		for _, t := range seq {
			if t < 0 || t >= v {
				return fmt.Errorf("ttt: chunk %d: token id %d outside the vocabulary (%d)", i, t, v)
			}
		}
	}
	return nil
}

// forked, when set (by tests), sees the fork Adapt trains on.
var forked func(*inference.Model)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
