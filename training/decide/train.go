package decide

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// Defaults of Options.
const (
	DefaultEpochs           = 3
	DefaultBatchSize        = 8
	DefaultLearningRate     = 3e-4
	DefaultHeadLearningRate = 5e-3
	DefaultRank             = 8
	DefaultScale            = 10.0
	DefaultMaxSeqLength     = 1024
	DefaultStepsPerReport   = 10
	DefaultClipGradNorm     = 1.0
)

// poolStatRows is how many training sequences per question set the pooled
// state's standardization.
const poolStatRows = 256

// Options is one decision-model training run.
type Options struct {
	// LoRA shapes the decision adapter (all blocks by default, rank 8, scale 10).
	LoRA lora.Config
	// HeadOnly trains the head alone, no adapter: faster, weaker.
	HeadOnly bool

	Epochs       int     // passes over the training rows
	Iters        int     // when > 0, the number of updates instead of Epochs
	BatchSize    int     // rows per update; all their answered questions count
	LearningRate float64 // the adapter's peak rate (warmup, then cosine decay)
	// HeadLearningRate is the head's peak rate: its weights are few and start
	// where they are useful, so they take larger steps than the adapter's.
	HeadLearningRate float64
	ClipGradNorm     float64 // global-norm clipping; -1 is off

	// Heldout is the share of rows the split holds out (DefaultHeldout); Split,
	// when set, is a split made before (its held-out rows are never trained on).
	Heldout float64
	Split   *Split
	// MaxTrainRows trains on that many of the training rows (a seeded sample);
	// 0 is all. The held-out rows stay the same.
	MaxTrainRows int

	MaxSeqLength   int // longest sequence; a state that does not fit is cut (default: the model's, at most 1024)
	Seed           uint64
	StepsPerReport int
	// StepsPerEval is how often the held-out loss and accuracy are measured for
	// the curves (never used to choose anything); 0 is once per epoch, -1 only
	// at the start and the end.
	StepsPerEval int
	// BatchTokens caps a forward pass when scoring held-out rows.
	BatchTokens int
}

func (o Options) withDefaults(m *inference.Model) Options {
	if o.Epochs == 0 {
		o.Epochs = DefaultEpochs
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.HeadLearningRate == 0 {
		o.HeadLearningRate = DefaultHeadLearningRate
	}
	if o.ClipGradNorm == 0 {
		o.ClipGradNorm = DefaultClipGradNorm
	}
	if o.Heldout == 0 {
		o.Heldout = DefaultHeldout
	}
	if o.StepsPerReport == 0 {
		o.StepsPerReport = DefaultStepsPerReport
	}
	if o.MaxSeqLength == 0 {
		o.MaxSeqLength = DefaultMaxSeqLength
		if p := m.Config().MaxPositionEmbeddings; p > 0 {
			o.MaxSeqLength = min(o.MaxSeqLength, p)
		}
	}
	if o.LoRA.NumLayers == 0 {
		o.LoRA.NumLayers = -1
	}
	if o.LoRA.Rank == 0 {
		o.LoRA.Rank = DefaultRank
	}
	if o.LoRA.Scale == 0 {
		o.LoRA.Scale = DefaultScale
	}
	if o.LoRA.Seed == 0 {
		o.LoRA.Seed = o.Seed
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Epochs < 0 || o.Iters < 0 || o.BatchSize < 1 || o.StepsPerReport < 1 || o.MaxTrainRows < 0:
		return fmt.Errorf("decide: epochs %d, iters %d, batch size %d, steps per report %d and max train rows %d must not be negative (batch size and report at least 1)",
			o.Epochs, o.Iters, o.BatchSize, o.StepsPerReport, o.MaxTrainRows)
	case !(o.LearningRate > 0) || !(o.HeadLearningRate > 0) || math.IsInf(o.LearningRate, 0) || math.IsInf(o.HeadLearningRate, 0):
		return fmt.Errorf("decide: learning rates %g and %g must be positive", o.LearningRate, o.HeadLearningRate)
	case !(o.Heldout > 0 && o.Heldout < 1):
		return fmt.Errorf("decide: held-out share %g is not between 0 and 1", o.Heldout)
	case o.MaxSeqLength < 32:
		return fmt.Errorf("decide: max sequence length %d is below 32", o.MaxSeqLength)
	}
	return o.LoRA.Validate()
}

// Event is one progress report of decision training: the trainer's event, and
// with EventVal the held-out accuracy per question. Step 0's EventVal is the
// zero-shot model.
type Event struct {
	trainer.Event
	Accuracy map[string]float64
}

// Result summarizes a run.
type Result struct {
	Steps     int
	TrainLoss float64
	Duration  time.Duration
	TrainRows int
	Heldout   int
	Warnings  []string
}

// Train trains a decision model for task t on rows over base, which it leaves
// alone (the adapter goes on a fork). It splits the rows first (or applies
// opts.Split), measures the zero-shot model on the held-out rows, trains the
// adapter and head with cross-entropy on the training rows' answered
// questions, and calibrates each question on the held-out rows. onEvent, when
// not nil, gets progress on the calling goroutine. A cancelled run returns
// ctx's error and no model.
func Train(ctx context.Context, base *inference.Model, tok *tokenizer.Tokenizer, t *Task, rows []Row, opts Options, onEvent func(Event)) (*Model, Result, error) {
	began := time.Now()
	res := Result{TrainLoss: math.NaN()}
	opts = opts.withDefaults(base)
	if err := opts.validate(); err != nil {
		return nil, res, err
	}
	emit := func(ev Event) {
		if onEvent != nil {
			onEvent(ev)
		}
	}
	info := func(kind trainer.EventKind, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if kind == trainer.EventWarning {
			res.Warnings = append(res.Warnings, msg)
		}
		emit(Event{Event: trainer.Event{Kind: kind, Message: msg}})
	}

	split := opts.Split
	if split == nil {
		var err error
		if split, err = MakeSplit(rows, opts.Heldout, opts.Seed); err != nil {
			return nil, res, err
		}
	}
	trainRows, heldRows, err := split.Apply(rows)
	if err != nil {
		return nil, res, err
	}
	if opts.MaxTrainRows > 0 && opts.MaxTrainRows < len(trainRows) {
		r := rand.New(rand.NewPCG(opts.Seed, 0x5a3e))
		perm := r.Perm(len(trainRows))[:opts.MaxTrainRows]
		sort.Ints(perm)
		sub := make([]Row, len(perm))
		for i, p := range perm {
			sub[i] = trainRows[p]
		}
		trainRows = sub
	}
	res.TrainRows, res.Heldout = len(trainRows), len(heldRows)
	info(trainer.EventInfo, "%d rows to train on, %d held out (stratified by answers, seed %d)", len(trainRows), len(heldRows), split.Seed)

	marker, err := DefaultMarker(tok, base.Config())
	if err != nil {
		return nil, res, err
	}
	enc, err := NewEncoder(tok, t, marker, opts.MaxSeqLength)
	if err != nil {
		return nil, res, err
	}
	for q, names := range enc.SharedFirstTokens() {
		info(trainer.EventWarning, "question %s: options %s start with the same token, so the untrained model cannot tell them apart", q, strings.Join(names, ", "))
	}

	work := base.Fork()
	if !opts.HeadOnly {
		if _, err := lora.Apply(work, opts.LoRA); err != nil {
			return nil, res, err
		}
	}
	head, err := InitHead(work, enc)
	if err != nil {
		return nil, res, err
	}
	var adapterCfg *inference.AdapterConfig
	if !opts.HeadOnly {
		if adapterCfg, err = lora.AdapterConfig(work, opts.LoRA); err != nil {
			return nil, res, err
		}
	}
	m := &Model{Task: t, Split: split, model: work, adapterCfg: adapterCfg, enc: enc, head: head,
		Meta: Meta{Format: 1, PromptVersion: PromptVersion, Marker: marker, MaxSeqLength: opts.MaxSeqLength, Adapter: !opts.HeadOnly, Base: baseOf(base), Rows: len(trainRows)}}

	// The training rows' sequences, tokenized once.
	type trainItem struct {
		seqs   []Sequence
		labels []int
	}
	items := make([]trainItem, 0, len(trainRows))
	cut := 0
	for _, r := range trainRows {
		toks, err := enc.StateTokens(r.State)
		if err != nil {
			return nil, res, err
		}
		var it trainItem
		for q := range t.Questions {
			if r.Answered(q) {
				s := enc.Sequence(q, toks)
				if s.Cut {
					cut++
				}
				it.seqs, it.labels = append(it.seqs, s), append(it.labels, r.Labels[q])
			}
		}
		if len(it.seqs) > 0 {
			items = append(items, it)
		}
	}
	if len(items) == 0 {
		return nil, res, errors.New("decide: no training row answers any question")
	}
	if cut > 0 {
		info(trainer.EventWarning, "%d training sequences were cut to %d tokens", cut, opts.MaxSeqLength)
	}

	perEpoch := (len(items) + opts.BatchSize - 1) / opts.BatchSize
	iters := opts.Iters
	if iters == 0 {
		iters = opts.Epochs * perEpoch
	}
	evalEvery := opts.StepsPerEval
	if evalEvery == 0 {
		evalEvery = perEpoch
	}

	// Step 0: the zero-shot model on the held-out rows.
	zero, zeroLoss, err := m.heldoutFigures(ctx, heldRows)
	if err != nil {
		return nil, res, err
	}
	emit(Event{Event: trainer.Event{Kind: trainer.EventVal, Step: 0, Iters: iters, ValLoss: zeroLoss}, Accuracy: accuracies(zero)})

	var all []Sequence
	for _, it := range items {
		all = append(all, it.seqs...)
	}
	if err := setPoolStats(work, head, t, all, poolStatRows, marker); err != nil {
		return nil, res, err
	}
	params := map[string]*mx.Array{}
	for n, a := range head {
		if !isFixed(n) {
			params[n] = a
		}
	}
	if !opts.HeadOnly {
		maps.Copy(params, lora.Params(work))
	}
	warmup := max(1, iters/20)
	stepper := trainer.Stepper{
		Bind: func(p map[string]*mx.Array) (*inference.Model, error) {
			if opts.HeadOnly {
				return work, nil
			}
			ad := make(map[string]*mx.Array, len(p))
			for n, a := range p {
				if !IsHeadParam(n) {
					ad[n] = a
				}
			}
			return work, lora.SetParams(work, ad)
		},
		Optimizer: newGroupOptimizer(
			optim.WarmupCosine(float32(opts.HeadLearningRate), warmup, iters-warmup, 0),
			optim.WarmupCosine(float32(opts.LearningRate), warmup, iters-warmup, 0), opts.HeadOnly),
	}
	if opts.ClipGradNorm > 0 {
		stepper.ClipNorm = opts.ClipGradNorm
	}
	k := func(q int) int { return len(t.Questions[q].Options) }
	rng := rand.New(rand.NewPCG(opts.Seed, 0xba7c))
	order := rng.Perm(len(items))
	pos := 0
	windowStart := time.Now()
	loopStart := windowStart
	var windowLoss, windowWeight float64
	var windowTokens, tokens int64
	for step := 1; step <= iters; step++ {
		if err := ctx.Err(); err != nil {
			return nil, res, fmt.Errorf("decide: stopped after step %d: %w", step-1, err)
		}
		var seqs []Sequence
		var labels []int
		for range opts.BatchSize {
			if pos == len(order) {
				order, pos = rng.Perm(len(items)), 0
			}
			it := items[order[pos]]
			pos++
			seqs, labels = append(seqs, it.seqs...), append(labels, it.labels...)
		}
		bt := newBatch(seqs, labels, k, marker)
		sr, err := stepper.Step(ctx, params, []trainer.Batch{{
			Weight: float32(len(labels)),
			Tokens: int64(bt.tokens),
			Loss: func(mm *inference.Model, p map[string]*mx.Array) *mx.Array {
				full := maps.Clone(head) // the fixed weights beside the traced ones
				maps.Copy(full, p)
				return loss(mm, full, t, bt)
			},
		}})
		if err != nil {
			if ctx.Err() != nil {
				return nil, res, fmt.Errorf("decide: stopped after step %d: %w", step-1, ctx.Err())
			}
			return nil, res, err
		}
		params = sr.Params
		res.Steps, res.TrainLoss = step, sr.Loss
		tokens += sr.Tokens
		windowLoss += sr.Loss * sr.Weight
		windowWeight += sr.Weight
		windowTokens += sr.Tokens
		for n := range head {
			if !isFixed(n) {
				head[n] = params[n]
			}
		}
		if step%opts.StepsPerReport == 0 || step == iters {
			now := time.Now()
			el := now.Sub(loopStart)
			_, peak, _ := mx.Memory(work.Backend())
			emit(Event{Event: trainer.Event{Kind: trainer.EventTrain, Step: step, Iters: iters, Loss: windowLoss / windowWeight, LR: sr.LR,
				TokensPerSec: float64(windowTokens) / max(now.Sub(windowStart).Seconds(), 1e-9), Tokens: tokens, Elapsed: el,
				ETA: time.Duration(float64(el) / float64(step) * float64(iters-step)), PeakMemory: peak}})
			windowStart, windowLoss, windowWeight, windowTokens = now, 0, 0, 0
		}
		if evalEvery > 0 && step%evalEvery == 0 && step != iters {
			figs, l, err := m.heldoutFigures(ctx, heldRows)
			if err != nil {
				return nil, res, err
			}
			emit(Event{Event: trainer.Event{Kind: trainer.EventVal, Step: step, Iters: iters, ValLoss: l}, Accuracy: accuracies(figs)})
		}
	}
	m.Meta.Steps = res.Steps

	// The end: the trained model's held-out scores give the last point of the
	// curves and the calibration.
	scores, labels, err := m.heldoutScores(ctx, heldRows)
	if err != nil {
		return nil, res, err
	}
	figs, l, err := m.figures(scores, labels)
	if err != nil {
		return nil, res, err
	}
	emit(Event{Event: trainer.Event{Kind: trainer.EventVal, Step: res.Steps, Iters: iters, ValLoss: l}, Accuracy: accuracies(figs)})
	if err := m.calibrateOn(scores, labels, zero, opts.Seed); err != nil {
		return nil, res, err
	}
	for _, q := range t.Questions {
		if c := m.Calibration.Questions[q.Name]; c != nil {
			info(trainer.EventInfo, "%s: held-out accuracy %.3f (zero-shot %.3f); temperature %.2f takes ECE from %.3f to %.3f",
				q.Name, c.After.Accuracy, c.ZeroShot.Accuracy, c.Temperature, c.Before.ECE, c.After.ECE)
		}
	}
	res.Duration = time.Since(began)
	emit(Event{Event: trainer.Event{Kind: trainer.EventDone, Step: res.Steps, Iters: iters, Elapsed: res.Duration}})
	return m, res, nil
}

// heldoutFigures measures m (at temperature 1) on the held-out rows: metrics
// per question and the mean cross-entropy over all answered questions.
func (m *Model) heldoutFigures(ctx context.Context, rows []Row) (map[string]calibrate.Metrics, float64, error) {
	scores, labels, err := m.heldoutScores(ctx, rows)
	if err != nil {
		return nil, math.NaN(), err
	}
	return m.figures(scores, labels)
}

func (m *Model) figures(scores [][][]float64, labels [][]int) (map[string]calibrate.Metrics, float64, error) {
	out := map[string]calibrate.Metrics{}
	var nll float64
	var n int
	for qi, q := range m.Task.Questions {
		if len(scores[qi]) == 0 {
			continue
		}
		met, err := calibrate.Evaluate(scores[qi], labels[qi], 1)
		if err != nil {
			return nil, math.NaN(), fmt.Errorf("decide: %s: %w", q.Name, err)
		}
		out[q.Name] = met
		nll += met.NLL * float64(met.N)
		n += met.N
	}
	if n == 0 {
		return out, math.NaN(), nil
	}
	return out, nll / float64(n), nil
}

func accuracies(ms map[string]calibrate.Metrics) map[string]float64 {
	out := make(map[string]float64, len(ms))
	for q, m := range ms {
		out[q] = m.Accuracy
	}
	return out
}

// ZeroShot is a decision model with a fresh head and no adapter: restricted
// decoding in the head's form, for measuring step 0 and for tests.
func ZeroShot(base *inference.Model, tok *tokenizer.Tokenizer, t *Task, maxSeqLength int) (*Model, error) {
	if maxSeqLength == 0 {
		maxSeqLength = Options{}.withDefaults(base).MaxSeqLength
	}
	marker, err := DefaultMarker(tok, base.Config())
	if err != nil {
		return nil, err
	}
	enc, err := NewEncoder(tok, t, marker, maxSeqLength)
	if err != nil {
		return nil, err
	}
	work := base.Fork()
	head, err := InitHead(work, enc)
	if err != nil {
		return nil, err
	}
	return &Model{Task: t, model: work, enc: enc, head: head,
		Meta: Meta{Format: 1, PromptVersion: PromptVersion, Marker: marker, MaxSeqLength: maxSeqLength, Base: baseOf(base)}}, nil
}
