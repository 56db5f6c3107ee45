package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/inloop/inloop/adapt/ror"

	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/store"
)

// A stored chat can be continued: its messages come back into the session
// (the KV cache is rebuilt by the next reply's prefill), its replies take
// thumbs again, and with δ-mem the memory goes on from the chat's newest
// stored state.

// resumable checks that spec.Resume is a stored chat with spec's model and
// returns its messages, and the chat itself as where its memory goes on from
// when it has a stored one (0 otherwise).
func (w *Workspace) resumable(ctx context.Context, spec ChatSpec, info store.Model) ([]store.Message, int64, error) {
	ch, err := w.Store.Chat(ctx, spec.Resume)
	if err != nil {
		return nil, 0, err
	}
	if ch.Model != info.Name {
		return nil, 0, fmt.Errorf("chat %d was with %s, not %s", ch.ID, ch.Model, info.Name)
	}
	var from int64
	if _, err := w.Store.ChatMemory(ctx, ch.ID); err == nil {
		from = ch.ID
	}
	msgs, err := w.Store.Messages(ctx, ch.ID)
	return msgs, from, err
}

// restore puts stored messages back into the conversation, and makes the last
// replies reachable by feedback again (their prompts are rendered as the chat
// sent them when a thumb comes).
func (c *ChatSession) restore(msgs []store.Message) {
	for i, m := range msgs {
		c.msgs = append(c.msgs, chat.Message{Role: m.Role, Content: m.Content})
		if m.Role != "assistant" || c.raw || len(msgs)-i > 2*maxKeptReplies {
			continue
		}
		asked := ""
		if i > 0 && msgs[i-1].Role == "user" {
			asked = msgs[i-1].Content
		}
		turn := Turn{MessageID: m.ID, Text: m.Content}
		if m.Stats != nil && m.Stats.Tokens > 0 {
			turn.Stats.GeneratedTokens = m.Stats.Tokens
			turn.Stats.LogProb = m.Stats.LogProb
		}
		conv := c.msgs[: len(c.msgs)-1 : len(c.msgs)-1] // its own view: later turns append elsewhere
		c.keepReply(&turn, nil, conv, asked)
	}
}

// correctionsDir is where a chat's correction adapter is kept.
func (w *Workspace) correctionsDir(chatID int64) string {
	return w.path("chats", fmt.Sprint(chatID), "corrections")
}

// saveCorrections keeps the correction adapter the chat answers with, so a
// continued chat has it back.
func (c *ChatSession) saveCorrections(l *ror.ChatLearner) error {
	if err := l.Save(c.w.correctionsDir(c.ID)); err != nil {
		return fmt.Errorf("the correction is in use but was not saved: %w", err)
	}
	return nil
}

// loadCorrections puts back the correction adapter a continued chat had.
func (c *ChatSession) loadCorrections() error {
	dir := c.w.correctionsDir(c.ID)
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err != nil {
		return nil // the chat never kept a correction
	}
	l, err := ror.NewChatFrom(c.model, &c.mu, ror.ChatOptions{}, dir)
	if err != nil {
		return err
	}
	c.learner = l
	return nil
}
