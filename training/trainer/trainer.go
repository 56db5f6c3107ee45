// Package trainer fine-tunes a model with LoRA (QLoRA over a quantized model
// folder): it loads the model and the data, trains the adapters with
// checkpoints that a killed run resumes from exactly, validates, tests, and
// reports progress as events on a channel.
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/checkpoint"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// ErrNonFinite is wrapped by the error of a run stopped by a NaN or infinite
// loss or gradient.
var ErrNonFinite = errors.New("trainer: loss or gradient is not finite")

// run is one training run's state.
type run struct {
	cfg    Config
	ctx    context.Context
	events chan<- Event
	b      mx.Backend
	m      *inference.Model
	lcfg   lora.Config
	ac     *inference.AdapterConfig
	opt    optim.Optimizer
	params map[string]*mx.Array
	padID  int32

	train, valid, test []data.Example
	batcher            *data.Batcher

	lastCheckpoint string
	res            Result
}

func (r *run) emit(ev Event) {
	if r.events == nil {
		return
	}
	ev.Iters = r.cfg.Iters
	select {
	case r.events <- ev:
	case <-r.ctx.Done():
	}
}

func (r *run) info(format string, args ...any) {
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf(format, args...)})
}

func (r *run) warn(format string, args ...any) {
	r.emit(Event{Kind: EventWarning, Message: fmt.Sprintf(format, args...)})
}

// Train runs cfg to its last iteration, or until ctx is cancelled, sending
// progress to events (which may be nil) and closing it when it returns. The
// backend cfg names becomes mlxbridge's default. A cancelled or failed run
// keeps its checkpoints; the error says which one a resume would continue from.
func Train(ctx context.Context, cfg Config, events chan<- Event) (Result, error) {
	if events != nil {
		defer close(events)
	}
	cfg = cfg.withDefaults()
	r := &run{cfg: cfg, ctx: ctx, events: events}
	r.res = Result{ValLoss: math.NaN(), TestLoss: math.NaN(), TestPerplexity: math.NaN(), TrainLoss: math.NaN(), AdapterPath: cfg.AdapterPath}
	if err := cfg.validate(); err != nil {
		return r.res, err
	}
	start := time.Now()
	err := r.run()
	r.res.Duration = time.Since(start)
	r.res.LastCheckpoint = r.lastCheckpoint
	return r.res, err
}

func (r *run) run() error {
	cfg := r.cfg
	b, err := mx.Open(cfg.Backend)
	if err != nil {
		return err
	}
	mx.SetDefault(b)
	r.b = b
	if r.m, err = inference.Load(cfg.Model, b); err != nil {
		return err
	}
	for _, w := range r.m.Warnings() {
		r.warn("%s", w)
	}
	if err := r.loadData(); err != nil {
		return err
	}
	if cfg.Epochs > 0 {
		per := r.batcher.Len()
		r.cfg.Iters = (cfg.Epochs*per + cfg.GradAccumulation - 1) / cfg.GradAccumulation
		cfg = r.cfg
		r.info("%d epochs of %d batches: %d updates", cfg.Epochs, per, cfg.Iters)
	}
	r.lcfg = lora.Config{NumLayers: cfg.NumLayers, Rank: cfg.Rank, Scale: cfg.Scale, Dropout: cfg.Dropout, Keys: cfg.Keys, Seed: cfg.Seed}.WithDefaults()
	paths, err := lora.Apply(r.m, r.lcfg)
	if err != nil {
		return err
	}
	if r.ac, err = lora.AdapterConfig(r.m, r.lcfg); err != nil {
		return err
	}
	r.params = lora.Params(r.m)
	var nparam int64
	for _, p := range r.params {
		nparam += int64(p.Size())
	}
	quant := ""
	if r.m.Config().Quantization != nil {
		quant = fmt.Sprintf(" over a %d-bit base (QLoRA)", r.m.Config().Quantization.Bits)
	}
	r.info("LoRA rank %d, scale %g on %d layers%s: %d trainable parameters (%.3f%% of %s)",
		r.lcfg.Rank, r.lcfg.Scale, len(paths), quant, nparam, 100*float64(nparam)/float64(max(1, modelParams(r.m))), fmtBytes(r.m.WeightBytes()))
	r.opt = cfg.optimizer()
	r.memoryCheck(nparam)

	startStep := 0
	if cfg.Resume {
		if startStep, err = r.resume(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cfg.AdapterPath, 0o755); err != nil {
		return err
	}
	if err := r.loop(startStep); err != nil {
		return err
	}
	if len(r.test) > 0 {
		loss, err := r.evaluate(r.test, cfg.TestBatches)
		if err != nil {
			return err
		}
		r.res.TestLoss, r.res.TestPerplexity = loss, math.Exp(loss)
		r.emit(Event{Kind: EventTest, Step: r.res.Steps, TestLoss: loss, TestPerplexity: math.Exp(loss)})
	}
	r.emit(Event{Kind: EventDone, Step: r.res.Steps, Path: cfg.AdapterPath})
	return nil
}

func modelParams(m *inference.Model) int64 {
	var n int64
	for _, p := range m.Params() {
		n += int64(p.Size())
	}
	return n
}

// resume restores the newest good checkpoint and returns its step.
func (r *run) resume() (int, error) {
	path, step, err := checkpoint.Latest(r.cfg.AdapterPath)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		r.info("no checkpoint in %s; starting from the beginning", r.cfg.AdapterPath)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ck, err := checkpoint.LoadOn(r.b, path)
	if err != nil {
		return 0, err
	}
	if len(ck.Adapters) != len(r.params) {
		return 0, fmt.Errorf("trainer: checkpoint %s has %d adapter arrays, this run %d: the LoRA settings differ", path, len(ck.Adapters), len(r.params))
	}
	for name, a := range ck.Adapters {
		ck.Adapters[name] = mx.AsType(a, mx.Float32)
	}
	if err := lora.SetParams(r.m, ck.Adapters); err != nil {
		return 0, fmt.Errorf("trainer: checkpoint %s does not fit this run: %w", path, err)
	}
	r.params = lora.Params(r.m)
	if err := r.opt.SetState(optim.State(ck.Optimizer)); err != nil {
		return 0, fmt.Errorf("trainer: checkpoint %s: %w", path, err)
	}
	if err := r.batcher.Seek(data.Position{Epoch: ck.Data.Epoch, Index: ck.Data.Batch}); err != nil {
		return 0, fmt.Errorf("trainer: checkpoint %s: %w", path, err)
	}
	if r.opt.Steps() != step {
		return 0, fmt.Errorf("trainer: checkpoint %s is step %d but its optimizer has %d updates", path, step, r.opt.Steps())
	}
	var prev Config
	if json.Unmarshal(ck.Config, &prev) == nil {
		c := r.cfg
		for _, d := range []struct {
			name    string
			was, is any
		}{
			{"data", prev.Data, c.Data}, {"batch size", prev.BatchSize, c.BatchSize},
			{"grad accumulation", prev.GradAccumulation, c.GradAccumulation}, {"max seq length", prev.MaxSeqLength, c.MaxSeqLength},
			{"seed", prev.Seed, c.Seed}, {"learning rate", prev.LearningRate, c.LearningRate}, {"dropout", prev.Dropout, c.Dropout},
		} {
			if d.was != d.is {
				r.warn("resuming with %s %v where the checkpoint had %v: the run will not match an uninterrupted one", d.name, d.is, d.was)
			}
		}
	}
	r.lastCheckpoint = path
	r.res.ResumedFrom = step
	r.res.Steps = step
	r.info("resumed from %s (step %d)", path, step)
	return step, nil
}

// tensors makes a batch's arrays on the run's backend.
func (r *run) tensors(bt data.Batch) (ids, targets, mask *mx.Array) {
	ids = mx.FromData(r.b, mx.Int32, bt.IDs, bt.B, bt.L)
	targets = mx.FromData(r.b, mx.Int32, bt.Targets, bt.B, bt.L)
	mask = mx.FromData(r.b, mx.Float32, bt.Mask, bt.B, bt.L)
	return
}

func countMask(bt data.Batch) (learned float32, tokens int64) {
	for _, v := range bt.Mask {
		learned += v
	}
	for _, n := range bt.Lengths {
		tokens += int64(n)
	}
	return
}

// gradient returns one micro-batch's loss and gradients.
func (r *run) gradient(bt data.Batch) (float32, map[string]*mx.Array, error) {
	ids, targets, mask := r.tensors(bt)
	names, xs := optim.Flatten(r.params)
	outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
		if err := lora.SetParams(r.m, optim.Unflatten(names, p)); err != nil {
			return []*mx.Array{mx.Errorf("%v", err)}
		}
		return []*mx.Array{mx.CrossEntropyMasked(r.m.Forward(ids, nil), targets, mask)}
	}, xs)
	if serr := lora.SetParams(r.m, r.params); err == nil {
		err = serr
	}
	if err != nil {
		return 0, nil, err
	}
	loss, err := outs[0].Item()
	if err != nil {
		return 0, nil, err
	}
	return loss, optim.Unflatten(names, gs), nil
}

// evaluate is the token-weighted mean loss over the first n batches of ex
// (all with n < 0), without dropout.
func (r *run) evaluate(ex []data.Example, n int) (float64, error) {
	lora.SetDropout(r.m, 0, 0)
	bt, err := data.NewBatcher(ex, data.BatchOptions{BatchSize: r.cfg.BatchSize, MaxSeqLen: r.cfg.MaxSeqLength, PadID: r.padID})
	if err != nil {
		return math.NaN(), err
	}
	if n < 0 || n > bt.Len() {
		n = bt.Len()
	}
	var sum, count float64
	for i := 0; i < n; i++ {
		if err := r.ctx.Err(); err != nil {
			return math.NaN(), err
		}
		batch := bt.Next()
		ids, targets, mask := r.tensors(batch)
		loss, err := mx.CrossEntropyMasked(r.m.Forward(ids, nil), targets, mask).Item()
		if err != nil {
			return math.NaN(), err
		}
		w, _ := countMask(batch)
		sum += float64(loss) * float64(w)
		count += float64(w)
	}
	if count == 0 {
		return math.NaN(), nil
	}
	return sum / count, nil
}

// dropoutSeed keys the dropout masks of one micro-batch, so a resumed run
// draws what an uninterrupted one would.
func dropoutSeed(seed uint64, step, micro int) uint64 {
	return seed*0x9e3779b97f4a7c15 + uint64(step)<<20 + uint64(micro) + 1
}

func (r *run) loop(startStep int) error {
	cfg := r.cfg
	if startStep >= cfg.Iters {
		r.info("the checkpoint is already at step %d of %d", startStep, cfg.Iters)
	}
	cfgJSON, _ := json.Marshal(cfg)
	var acc optim.Accumulator
	began := time.Now()
	windowStart := began
	var windowLoss, windowLearned float64
	var windowTokens int64
	var lastLoss float64 = math.NaN()
	lastSaved := startStep
	if startStep == 0 {
		lastSaved = -1
	}
	for step := startStep + 1; step <= cfg.Iters; step++ {
		if err := r.ctx.Err(); err != nil {
			return r.stopped(step-1, err)
		}
		var grads map[string]*mx.Array
		var stepLoss, stepLearned float64
		acc.Reset()
		for k := 0; k < cfg.GradAccumulation; k++ {
			bt := r.batcher.Next()
			lora.SetDropout(r.m, cfg.Dropout, dropoutSeed(cfg.Seed, step, k))
			loss, g, err := r.gradient(bt)
			if err != nil {
				return err
			}
			learned, tokens := countMask(bt)
			if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
				return r.nonFinite(step, fmt.Sprintf("loss is %v", loss))
			}
			stepLoss += float64(loss) * float64(learned)
			stepLearned += float64(learned)
			windowTokens += tokens
			r.res.Tokens += tokens
			if cfg.GradAccumulation == 1 {
				grads = g
			} else if err := acc.AddWeighted(g, learned); err != nil {
				return err
			}
		}
		if cfg.GradAccumulation > 1 {
			var err error
			if grads, err = acc.Mean(); err != nil {
				return err
			}
		}
		if cfg.ClipGradNorm > 0 {
			grads, _ = optim.ClipGlobalNorm(grads, float32(cfg.ClipGradNorm))
		}
		gradList := make([]*mx.Array, 0, len(grads))
		for _, g := range grads {
			gradList = append(gradList, g)
		}
		if ok, err := optim.AllFinite(gradList...); err != nil {
			return err
		} else if !ok {
			bad, _ := optim.NonFinite(grads)
			return r.nonFinite(step, fmt.Sprintf("gradient of %v is not finite", bad))
		}
		lr := r.opt.LearningRate()
		next, err := r.opt.Step(r.params, grads)
		if err != nil {
			return err
		}
		vals := make([]*mx.Array, 0, len(next))
		for _, p := range next {
			vals = append(vals, p)
		}
		if err := mx.Eval(vals...); err != nil {
			return err
		}
		r.params = next
		if err := lora.SetParams(r.m, next); err != nil {
			return err
		}
		r.res.Steps = step
		lastLoss = stepLoss / stepLearned
		r.res.TrainLoss = lastLoss
		windowLoss += stepLoss
		windowLearned += stepLearned

		if step%cfg.StepsPerReport == 0 || step == cfg.Iters {
			now := time.Now()
			done := step - startStep
			eta := time.Duration(float64(now.Sub(began)) / float64(done) * float64(cfg.Iters-step))
			_, peak, _ := mx.Memory(r.b)
			r.emit(Event{Kind: EventTrain, Step: step, Loss: windowLoss / windowLearned, LR: float64(lr),
				TokensPerSec: float64(windowTokens) / max(now.Sub(windowStart).Seconds(), 1e-9), Tokens: r.res.Tokens, ETA: eta, PeakMemory: peak})
			windowStart, windowLoss, windowLearned, windowTokens = now, 0, 0, 0
		}
		if len(r.valid) > 0 && cfg.StepsPerEval > 0 && (step%cfg.StepsPerEval == 0 || step == cfg.Iters) {
			v, err := r.evaluate(r.valid, cfg.ValBatches)
			if err != nil {
				if r.ctx.Err() != nil {
					return r.stopped(step, err)
				}
				return err
			}
			r.res.ValLoss = v
			r.emit(Event{Kind: EventVal, Step: step, ValLoss: v})
		}
		if (cfg.SaveEvery > 0 && step%cfg.SaveEvery == 0) || step == cfg.Iters {
			if err := r.save(step, cfgJSON, lastLoss); err != nil {
				return err
			}
			lastSaved = step
		}
	}
	if lastSaved != r.res.Steps && r.res.Steps > 0 {
		if err := r.save(r.res.Steps, cfgJSON, lastLoss); err != nil {
			return err
		}
	}
	return lora.SaveArrays(cfg.AdapterPath, r.params, r.ac)
}

// save writes a checkpoint and the adapter in mlx-lm's layout beside it.
func (r *run) save(step int, cfgJSON []byte, loss float64) error {
	vals := make([]*mx.Array, 0, len(r.params))
	for _, p := range r.params {
		vals = append(vals, p)
	}
	if ok, err := optim.AllFinite(vals...); err != nil {
		return err
	} else if !ok {
		return r.nonFinite(step, "the adapter weights are not finite")
	}
	pos := r.batcher.Position()
	ck := &checkpoint.Checkpoint{
		Step:      step,
		Adapters:  r.params,
		Optimizer: checkpoint.OptimizerState(r.opt.State()),
		Data:      checkpoint.DataPosition{Epoch: pos.Epoch, Batch: pos.Index, ShuffleSeed: r.cfg.Seed},
		Seed:      r.cfg.Seed,
		Config:    cfgJSON,
		Metrics:   map[string]float64{"train_loss": loss, "val_loss": r.res.ValLoss, "tokens": float64(r.res.Tokens)},
	}
	if err := checkpoint.Save(r.cfg.AdapterPath, ck); err != nil {
		return err
	}
	r.lastCheckpoint = checkpoint.Dir(r.cfg.AdapterPath, step)
	if r.cfg.KeepCheckpoints > 0 {
		if err := checkpoint.Prune(r.cfg.AdapterPath, r.cfg.KeepCheckpoints); err != nil {
			return err
		}
	}
	if err := lora.SaveArrays(r.cfg.AdapterPath, r.params, r.ac); err != nil {
		return err
	}
	r.emit(Event{Kind: EventCheckpoint, Step: step, Path: r.lastCheckpoint})
	return nil
}

func (r *run) keptMessage() string {
	if r.lastCheckpoint == "" {
		return "no checkpoint was saved"
	}
	return "the last good checkpoint is " + r.lastCheckpoint + " (continue with resume)"
}

func (r *run) nonFinite(step int, what string) error {
	return fmt.Errorf("%w: at step %d the %s; training stopped, %s; try a lower learning rate or gradient clipping",
		ErrNonFinite, step, what, r.keptMessage())
}

func (r *run) stopped(step int, err error) error {
	return fmt.Errorf("trainer: stopped after step %d: %w; %s", step, err, r.keptMessage())
}

// loadData reads cfg.Data and builds the training batcher.
func (r *run) loadData() error {
	cfg := r.cfg
	tok, err := tokenizer.Load(cfg.Model)
	if err != nil {
		return err
	}
	eos := -1
	if ids := tok.EOS(); len(ids) > 0 {
		eos = ids[0]
	} else if mc := r.m.Config(); len(mc.StopTokens()) > 0 {
		eos = mc.StopTokens()[0]
	}
	opt := data.Options{Tokenizer: tok, AppendEOS: eos >= 0, EOS: eos}
	if tmpl, err := chat.LoadTemplate(cfg.Model); err == nil {
		opt.Renderer = renderer{tmpl}
	} else {
		r.warn("chat template: %v (chat rows will be refused)", err)
	}
	if eos >= 0 {
		r.padID = int32(eos)
	}
	st, err := os.Stat(cfg.Data)
	if err != nil {
		return fmt.Errorf("trainer: data: %w", err)
	}
	var rep *data.Report
	switch {
	case st.IsDir() && data.IsSplitDir(cfg.Data):
		var sp *data.Splits
		sp, rep, err = data.LoadSplits(cfg.Data, opt)
		if err == nil {
			if sp.Train == nil {
				err = fmt.Errorf("trainer: %s has no train.jsonl", cfg.Data)
			} else {
				r.train = sp.Train.Examples
				if sp.Valid != nil {
					r.valid = sp.Valid.Examples
				}
				if sp.Test != nil {
					r.test = sp.Test.Examples
				}
			}
		}
	case st.IsDir():
		size := cfg.ChunkSize
		if size == 0 {
			size = min(data.DefaultChunkOptions.Size, cfg.MaxSeqLength)
		}
		co := data.ChunkOptions{Size: size, Overlap: size / 8}
		if id, ok := tok.BOS(); ok {
			co.Prefix = []int{id}
		}
		var c *data.Corpus
		if c, err = data.NewCorpus(cfg.Data, tok, co); err == nil {
			if _, err = c.Scan(); err == nil {
				r.train = c.Examples()
				for _, s := range c.Skipped() {
					r.warn("skipped %s", s.Error())
				}
				if len(r.train) == 0 {
					err = fmt.Errorf("trainer: %s: %w", cfg.Data, data.ErrNoExamples)
				}
			}
		}
		if err == nil {
			r.info("documents: %d files, %d chunks of up to %d tokens", len(c.Files()), len(r.train), size)
		}
	default:
		var set *data.Set
		set, rep, err = data.LoadJSONL(cfg.Data, opt)
		if err == nil {
			r.train = set.Examples
		}
	}
	if rep != nil && (len(rep.Issues) > 0 || len(rep.Warnings) > 0) {
		r.warn("data: %s", rep.String())
	}
	if err != nil {
		return err
	}
	r.batcher, err = data.NewBatcher(r.train, data.BatchOptions{
		BatchSize: cfg.BatchSize, MaxSeqLen: cfg.MaxSeqLength, PadID: r.padID, Shuffle: true, Seed: cfg.Seed,
	})
	if err != nil {
		return err
	}
	if r.batcher.Len() == 0 {
		return fmt.Errorf("trainer: %w: nothing to train on after cutting to %d tokens", data.ErrNoExamples, cfg.MaxSeqLength)
	}
	r.info("data: %d training, %d validation, %d test examples; %d batches per epoch", len(r.train), len(r.valid), len(r.test), r.batcher.Len())
	if tr := r.batcher.Truncation(); tr.Examples > 0 || tr.NoTargets > 0 || tr.TooShort > 0 {
		r.warn("max sequence length %d: %s", cfg.MaxSeqLength, tr.String())
	}
	return nil
}

// renderer applies a model's chat template for the data package.
type renderer struct{ t *chat.Template }

func (r renderer) Render(msgs []data.Message, gen bool) (string, error) {
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return r.t.Render(cm, chat.RenderOptions{AddGenerationPrompt: gen})
}
