// Package trainer trains: it holds the training step every trainer in Inloop
// shares (Stepper: gradient accumulation, clipping, non-finite checks, the
// optimizer; and Evaluate), LoRA training of an in-memory model on in-memory
// examples (TrainAdapter), and runs from files (Run: a model folder and a data
// folder, QLoRA over a quantized model, checkpoints that a killed run resumes
// from exactly, validation and test). Progress is reported as Events through a
// callback.
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
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/checkpoint"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// run is one training run from files.
type run struct {
	cfg     Config
	ctx     context.Context
	onEvent func(Event)
	b       mx.Backend
	m       *inference.Model
	ac      *inference.AdapterConfig
	padID   int32
	cfgJSON []byte

	train, valid, test []data.Example
	ar                 *adapterRun

	lastCheckpoint string
	lastSaved      int
	res            Result
}

func (r *run) emit(ev Event) {
	if r.onEvent == nil {
		return
	}
	ev.Iters = r.cfg.Iters
	r.onEvent(ev)
}

func (r *run) info(format string, args ...any) {
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf(format, args...)})
}

func (r *run) warn(format string, args ...any) {
	r.emit(Event{Kind: EventWarning, Message: fmt.Sprintf(format, args...)})
}

// Run trains cfg to its last iteration, or until ctx is cancelled, passing
// progress to onEvent (which may be nil) on the training goroutine. It trains on
// cfg.BackendImpl, or the backend cfg.Backend names, without making it
// mlxbridge's default. A cancelled or failed run keeps its checkpoints; the
// error says which one a resume would continue from.
func Run(ctx context.Context, cfg Config, onEvent func(Event)) (Result, error) {
	cfg = cfg.withDefaults()
	r := &run{cfg: cfg, ctx: ctx, onEvent: onEvent, lastSaved: -1}
	r.res = Result{ValLoss: math.NaN(), TestLoss: math.NaN(), TestPerplexity: math.NaN(), TrainLoss: math.NaN(), AdapterPath: cfg.AdapterPath}
	if err := cfg.validate(); err != nil {
		return r.res, err
	}
	start := time.Now()
	err := r.run()
	if r.ar != nil {
		ar := r.ar.res
		r.res.Steps, r.res.TrainLoss, r.res.ValLoss, r.res.Tokens = ar.Steps, ar.TrainLoss, ar.ValLoss, ar.Tokens
	}
	r.res.Duration = time.Since(start)
	r.res.LastCheckpoint = r.lastCheckpoint
	return r.res, err
}

func (r *run) run() error {
	cfg := r.cfg
	b := cfg.BackendImpl
	if b == nil {
		var err error
		if b, err = mx.Open(cfg.Backend); err != nil {
			return err
		}
	}
	r.b = b
	var err error
	load, err := inference.ParseDType(cfg.DType)
	if err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	if r.m, err = inference.LoadWithOptions(cfg.Model, b, load); err != nil {
		return err
	}
	for _, w := range r.m.Warnings() {
		r.warn("%s", w)
	}
	if err := r.loadData(); err != nil {
		return err
	}
	opts := cfg.options()
	opts.PadID, opts.Valid = r.padID, r.valid
	if r.ar, err = newAdapterRun(r.m, r.train, opts, r.onEvent); err != nil {
		return err
	}
	r.info("data: %d training, %d validation, %d test examples; %d batches per epoch", len(r.train), len(r.valid), len(r.test), r.ar.batcher.Len())
	r.cfg.Iters = r.ar.opts.Iters // epochs resolved
	cfg = r.cfg
	if r.cfgJSON, err = json.Marshal(cfg); err != nil {
		return fmt.Errorf("trainer: config: %w", err)
	}
	lcfg := r.ar.opts.LoRA
	if r.ac, err = lora.AdapterConfig(r.m, lcfg); err != nil {
		return err
	}
	var nparam int64
	for _, p := range r.ar.params {
		nparam += int64(p.Size())
	}
	quant := ""
	if r.m.Config().Quantization != nil {
		quant = fmt.Sprintf(" over a %d-bit base (QLoRA)", r.m.Config().Quantization.Bits)
	}
	r.info("%s", paramBanner(lcfg, len(r.ar.params)/2, quant, nparam, r.m.ParamCount(), r.m.WeightBytes(), load.String()))
	r.memoryCheck(nparam)

	if cfg.Resume {
		if err := r.resume(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cfg.AdapterPath, 0o755); err != nil {
		return err
	}
	r.ar.afterStep = func(step int) error {
		if (cfg.SaveEvery > 0 && step%cfg.SaveEvery == 0) || step == cfg.Iters {
			return r.save(step)
		}
		return nil
	}
	if err := r.ar.loop(r.ctx); err != nil {
		if errors.Is(err, ErrNonFinite) || r.ctx.Err() != nil {
			err = fmt.Errorf("%w; %s", err, r.keptMessage())
		}
		return err
	}
	if steps := r.ar.res.Steps; r.lastSaved != steps && steps > 0 {
		if err := r.save(steps); err != nil {
			return err
		}
	}
	if err := lora.SaveArrays(cfg.AdapterPath, r.ar.params, r.ac); err != nil {
		return err
	}
	if len(r.test) > 0 {
		loss, err := r.ar.evaluate(r.ctx, r.test, cfg.TestBatches)
		if err != nil {
			return err
		}
		r.res.TestLoss, r.res.TestPerplexity = loss, math.Exp(loss)
		r.emit(Event{Kind: EventTest, Step: r.ar.res.Steps, TestLoss: loss, TestPerplexity: math.Exp(loss)})
	}
	r.emit(Event{Kind: EventDone, Step: r.ar.res.Steps, Path: cfg.AdapterPath})
	return nil
}

// paramBanner is the line a run starts with. The share of trainable parameters
// is mlx-lm's (print_trainable_parameters: the adapters over the base counted
// as get_total_parameters counts it, a quantized weight as the values it
// packs), so the two tools print the same figure; the bytes the base holds in
// memory are shown apart.
func paramBanner(l lora.Config, layers int, quant string, trainable, total, weightBytes int64, dtype string) string {
	return fmt.Sprintf("LoRA rank %d, scale %g on %d layers%s: %d trainable parameters, %.3f%% (%.3fM/%.3fM); base weights %s in %s",
		l.Rank, l.Scale, layers, quant, trainable, 100*float64(trainable)/float64(max(1, total)),
		float64(trainable)/1e6, float64(total)/1e6, fmtBytes(weightBytes), dtype)
}

// resume restores the newest good checkpoint: adapters, optimizer state and
// the position in the data.
func (r *run) resume() error {
	path, step, err := checkpoint.Latest(r.cfg.AdapterPath)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		r.info("no checkpoint in %s; starting from the beginning", r.cfg.AdapterPath)
		return nil
	}
	if err != nil {
		return err
	}
	ck, err := checkpoint.LoadOn(r.b, path)
	if err != nil {
		return err
	}
	if err := r.ar.setParams(ck.Adapters); err != nil {
		return fmt.Errorf("trainer: checkpoint %s does not fit this run: %w", path, err)
	}
	opt := r.ar.stepper.Optimizer
	if err := opt.SetState(optim.State(ck.Optimizer)); err != nil {
		return fmt.Errorf("trainer: checkpoint %s: %w", path, err)
	}
	if err := r.ar.batcher.Seek(data.Position{Epoch: ck.Data.Epoch, Index: ck.Data.Batch}); err != nil {
		return fmt.Errorf("trainer: checkpoint %s: %w", path, err)
	}
	if opt.Steps() != step {
		return fmt.Errorf("trainer: checkpoint %s is step %d but its optimizer has %d updates", path, step, opt.Steps())
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
	r.lastSaved = step
	r.res.ResumedFrom = step
	r.ar.res.Steps = step
	r.info("resumed from %s (step %d)", path, step)
	return nil
}

// save writes a checkpoint and the adapter in mlx-lm's layout beside it.
func (r *run) save(step int) error {
	params := r.ar.params
	if err := finite(params, "adapter weights", step); err != nil {
		return err
	}
	pos := r.ar.batcher.Position()
	res := r.ar.res
	ck := &checkpoint.Checkpoint{
		Step:      step,
		Adapters:  params,
		Optimizer: checkpoint.OptimizerState(r.ar.stepper.Optimizer.State()),
		Data:      checkpoint.DataPosition{Epoch: pos.Epoch, Batch: pos.Index, ShuffleSeed: r.cfg.Seed},
		Seed:      r.cfg.Seed,
		Config:    r.cfgJSON,
		Metrics:   map[string]float64{"train_loss": res.TrainLoss, "val_loss": res.ValLoss, "tokens": float64(res.Tokens)},
	}
	if err := checkpoint.Save(r.cfg.AdapterPath, ck); err != nil {
		return err
	}
	r.lastCheckpoint = checkpoint.Dir(r.cfg.AdapterPath, step)
	r.lastSaved = step
	if r.cfg.KeepCheckpoints > 0 {
		if err := checkpoint.Prune(r.cfg.AdapterPath, r.cfg.KeepCheckpoints); err != nil {
			return err
		}
	}
	if err := lora.SaveArrays(r.cfg.AdapterPath, params, r.ac); err != nil {
		return err
	}
	r.emit(Event{Kind: EventCheckpoint, Step: step, Path: r.lastCheckpoint})
	return nil
}

func (r *run) keptMessage() string {
	if r.lastCheckpoint == "" {
		return "no checkpoint was saved"
	}
	return "the last good checkpoint is " + r.lastCheckpoint
}

// loadData reads cfg.Data into the run's splits.
func (r *run) loadData() error {
	d, err := LoadDataset(r.cfg.Model, r.cfg.Data, r.cfg.ChunkSize, r.cfg.MaxSeqLength)
	if d != nil {
		for _, w := range d.Warnings {
			r.warn("%s", w)
		}
	}
	if err != nil {
		return err
	}
	if d.Kind == DataDocuments {
		r.info("documents: %d files, %d chunks of up to %d tokens", d.Files, len(d.Train), d.ChunkSize)
	}
	r.train, r.valid, r.test, r.padID = d.Train, d.Valid, d.Test, d.PadID
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
