package app

import (
	"context"

	"github.com/inloop/inloop/store"
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
