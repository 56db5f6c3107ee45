package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/trainer"
)

// TrainSpec is a LoRA/QLoRA training job: the trainer's settings with the model
// named as the registry names it. Model and Data are required; an empty
// AdapterPath puts the adapter under the data directory's adapters/ folder.
type TrainSpec struct {
	trainer.Config
}

// StartTrain starts a training job and records it as a run.
func (w *Workspace) StartTrain(ctx context.Context, spec TrainSpec) (*Job, error) {
	if spec.Model == "" || spec.Data == "" {
		return nil, fmt.Errorf("a training job needs a model and data")
	}
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	spec.Model = info.Path // names can be reused; the folder is the identity
	if spec.AdapterPath == "" {
		spec.AdapterPath = w.path("adapters", fmt.Sprintf("%s-%s", safeName(info.Name), stamp()))
	}
	params, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	run := store.Run{Kind: store.KindTrain, Model: info.Name, ModelID: info.ID, Dataset: spec.Data, Params: params, Output: spec.AdapterPath}
	return w.startTrain(ctx, run, spec)
}

func (w *Workspace) startTrain(ctx context.Context, run store.Run, spec TrainSpec) (*Job, error) {
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	cfg := spec.Config
	cfg.Model = info.Path
	cfg.BackendImpl = w.Backend
	return w.start(ctx, run, func(ctx context.Context, runID int64, emit func(Progress)) (any, string, error) {
		res, err := trainer.Run(ctx, cfg, func(ev trainer.Event) {
			w.recordTrainEvent(ctx, runID, ev)
			emit(trainProgress(ev))
		})
		result := trainResult(res)
		if err != nil {
			return result, res.AdapterPath, err
		}
		if _, aerr := w.Store.AddAdapter(context.WithoutCancel(ctx), store.Adapter{Model: info.Name, Name: safeName(info.Name) + " LoRA", Path: res.AdapterPath, RunID: runID}); aerr != nil {
			return result, res.AdapterPath, aerr
		}
		return result, res.AdapterPath, nil
	})
}

// recordTrainEvent stores a training event's figures as the run's metrics.
func (w *Workspace) recordTrainEvent(ctx context.Context, runID int64, ev trainer.Event) {
	ctx = context.WithoutCancel(ctx) // the last figures of a cancelled run count too
	now := time.Now()
	m := func(name string, v float64) store.Metric {
		return store.Metric{RunID: runID, Step: ev.Step, Name: name, Value: v, Time: now}
	}
	var ms []store.Metric
	switch ev.Kind {
	case trainer.EventTrain:
		ms = append(ms, m("train_loss", ev.Loss), m("learning_rate", ev.LR), m("tokens_per_sec", ev.TokensPerSec), m("tokens", float64(ev.Tokens)))
		if ev.PeakMemory > 0 {
			ms = append(ms, m("peak_memory", float64(ev.PeakMemory)))
		}
	case trainer.EventVal:
		ms = append(ms, m("val_loss", ev.ValLoss))
	case trainer.EventTest:
		ms = append(ms, m("test_loss", ev.TestLoss), m("test_perplexity", ev.TestPerplexity))
	case trainer.EventCheckpoint:
		_, _ = w.Store.AddCheckpoint(ctx, store.Checkpoint{RunID: runID, Step: ev.Step, Path: ev.Path})
	}
	if len(ms) > 0 {
		_ = w.Store.AddMetrics(ctx, ms)
	}
}

var trainPhases = map[trainer.EventKind]Phase{
	trainer.EventInfo: PhaseInfo, trainer.EventWarning: PhaseWarning, trainer.EventTrain: PhaseTrain, trainer.EventVal: PhaseVal,
	trainer.EventTest: PhaseTest, trainer.EventCheckpoint: PhaseCheckpoint, trainer.EventDone: PhaseInfo,
}

func trainProgress(ev trainer.Event) Progress {
	p := Progress{Step: ev.Step, Steps: ev.Iters, Loss: ev.Loss, ValLoss: ev.ValLoss, TestLoss: ev.TestLoss, LR: ev.LR,
		TokensPerSec: ev.TokensPerSec, Tokens: ev.Tokens, PeakMemory: ev.PeakMemory, ETA: ev.ETA, Path: ev.Path, Message: ev.Message}
	p.Phase = trainPhases[ev.Kind]
	if ev.Kind == trainer.EventDone {
		p.Message = "training finished; adapter saved to " + ev.Path
	}
	if p.Phase == "" {
		p.Phase = PhaseInfo
	}
	return p
}

// trainResult is a run's final figures; figures that do not exist (no test set)
// are left out, as JSON has no NaN.
func trainResult(r trainer.Result) map[string]any {
	out := map[string]any{"steps": r.Steps, "tokens": r.Tokens, "seconds": r.Duration.Seconds(), "adapter": r.AdapterPath}
	if r.ResumedFrom > 0 {
		out["resumed_from"] = r.ResumedFrom
	}
	if r.LastCheckpoint != "" {
		out["last_checkpoint"] = r.LastCheckpoint
	}
	for k, v := range map[string]float64{"train_loss": r.TrainLoss, "val_loss": r.ValLoss, "test_loss": r.TestLoss, "test_perplexity": r.TestPerplexity} {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[k] = v
		}
	}
	return out
}

// safeName makes a model name usable in a folder name.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	return string(b)
}

// stamp names things made now: 20261201-174502.
func stamp() string { return time.Now().Format("20060102-150405") }
