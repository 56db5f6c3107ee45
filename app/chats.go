package app

import (
	"context"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/store"
)

// saveTurn stores a user's message and the reply with its figures.
func (w *Workspace) saveTurn(ctx context.Context, chatID int64, user, reply string, st inference.Stats) error {
	ctx = context.WithoutCancel(ctx) // a stopped reply is still part of the chat
	if _, err := w.Store.AddMessage(ctx, store.Message{ChatID: chatID, Role: "user", Content: user}); err != nil {
		return err
	}
	_, err := w.Store.AddMessage(ctx, store.Message{ChatID: chatID, Role: "assistant", Content: reply, Stats: replyStats(st)})
	return err
}

func replyStats(st inference.Stats) *store.MessageStats {
	return &store.MessageStats{PromptTokens: st.PromptTokens, Tokens: st.GeneratedTokens, TokensPerSec: st.DecodeTPS,
		TTFTms: float64(st.TimeToFirstToken.Microseconds()) / 1000, KVBytes: st.KVBytes, PeakBytes: st.PeakMemory, StopReason: st.StopReason}
}
