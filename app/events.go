package app

import (
	"context"
	"os"

	"github.com/inloop/inloop/adapt/deltamem"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/trainer"
)

// AdaptationEvent is one step of the inference loop as the store keeps it.
type AdaptationEvent = store.AdaptationEvent

// The adaptation methods (AdaptationEvent.Method).
const (
	MethodTTT      = store.MethodTTT
	MethodRoR      = store.MethodRoR
	MethodTAO      = store.MethodTAO
	MethodDeltaMem = store.MethodDeltaMem
)

// AdaptationEvents lists a model's adaptation events, newest first, at most
// limit (0: all).
func (w *Workspace) AdaptationEvents(ctx context.Context, model string, limit int) ([]AdaptationEvent, error) {
	return w.Store.AdaptationEvents(ctx, store.EventFilter{Model: model, Limit: limit})
}

// TrainEvent is a training run's event (loss, progress), as TrainMemory
// reports it.
type TrainEvent = trainer.Event

// The kinds of TrainEvent a window follows.
const (
	TrainEventTrain = trainer.EventTrain
	TrainEventDone  = trainer.EventDone
)

// MemoryFile is where a model's trained δ-mem memory lives, and whether it is
// there.
func (w *Workspace) MemoryFile(ctx context.Context, model string) (string, bool) {
	info, err := w.ResolveModel(ctx, model)
	if err != nil {
		return "", false
	}
	p := deltamem.DefaultPath(info.Path)
	_, err = os.Stat(p)
	return p, err == nil
}
