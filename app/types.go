package app

import (
	"context"
	"fmt"

	"github.com/inloop/inloop/adapt/ttt"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/trainer"
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

	// ReplyStats are a reply's figures: tokens, speed, KV bytes, why it stopped.
	ReplyStats = inference.Stats
	// Sampling is how the next token is drawn.
	Sampling = inference.SampleOptions
	// MemoryEstimate is what a training run is expected to hold.
	MemoryEstimate = trainer.Estimate
	// TTTOptions steer test-time training in a chat; the zero value is the
	// defaults.
	TTTOptions = ttt.Options
	// KVCache is how a chat stores its keys and values (Bits 8 or 4: quantized; 16:
	// bfloat16).
	KVCache = inference.CacheOptions
)

// Why a reply stopped (ReplyStats.StopReason).
const (
	StopToken     = inference.StopToken     // the model ended its turn
	StopString    = inference.StopString    // a stop string of the template
	StopMaxTokens = inference.StopMaxTokens // the reply reached its token limit
	StopContext   = inference.StopContext   // the model's context is full
	StopCancelled = inference.StopCancelled // the user stopped it
)

// ContextUse is what a chat holds in the KV cache against its model's context.
type ContextUse struct {
	Tokens, Limit int   // Limit is 0 when the model sets none
	Bytes         int64 // the cache's bytes now
	BytesPerToken int64
}

// ContextUse reads the figures of the last reply st against the chat's model.
func (c *ChatSession) ContextUse(st ReplyStats) ContextUse {
	per := kvBytesPerToken(c.model.Config())
	return ContextUse{Tokens: int(st.KVBytes / max(per, 1)), Limit: c.model.ContextLength(), Bytes: st.KVBytes, BytesPerToken: per}
}

// EstimateTrainFor is EstimateTrain for a registered model.
func (w *Workspace) EstimateTrainFor(ctx context.Context, model string, batch, seq, rank, layers int) (MemoryEstimate, error) {
	info, err := w.ResolveModel(ctx, model)
	if err != nil {
		return MemoryEstimate{}, err
	}
	cfg, err := inference.ReadConfig(info.Path)
	if err != nil {
		return MemoryEstimate{}, err
	}
	return EstimateTrain(w.Backend, cfg, info.Bytes, batch, seq, rank, layers), nil
}

// AddFeedback records a thumb (+1 or -1) on a stored reply, with the user's
// correction when they gave one. It changes no weights: the adaptation methods
// read the feedback history.
func (w *Workspace) AddFeedback(ctx context.Context, messageID int64, thumb int, correction string) (int64, error) {
	if thumb != 1 && thumb != -1 {
		return 0, fmt.Errorf("feedback: thumb %d, want +1 or -1", thumb)
	}
	return w.Store.AddFeedback(ctx, store.Feedback{MessageID: messageID, Thumb: thumb, Correction: correction})
}
