package app

import (
	"context"
	"fmt"

	"github.com/inloop/inloop/store"
)

// The store's records as the window and other callers of the Workspace see them;
// only app imports store (DESIGN.md).
type (
	ModelInfo = store.Model
	RunRecord = store.Run
	RunKind   = store.RunKind
	RunStatus = store.RunStatus
	RunFilter = store.RunFilter
	Metric    = store.Metric
	Chat      = store.Chat
	Message   = store.Message
	Feedback  = store.Feedback
)

// AddFeedback records a thumb (+1 or -1) on a stored reply, with the user's
// correction when they gave one. It changes no weights: the adaptation methods
// read the feedback history.
func (w *Workspace) AddFeedback(ctx context.Context, messageID int64, thumb int, correction string) (int64, error) {
	if thumb != 1 && thumb != -1 {
		return 0, fmt.Errorf("feedback: thumb %d, want +1 or -1", thumb)
	}
	return w.Store.AddFeedback(ctx, store.Feedback{MessageID: messageID, Thumb: thumb, Correction: correction})
}
