package inference

import (
	"errors"
	"fmt"
)

// ErrContextFull is matched (errors.Is) by a prompt that does not fit the model's
// context window.
var ErrContextFull = errors.New("the prompt does not fit the model's context")

// ContextError says how far a prompt is over the model's context window, in one
// sentence a person can read.
type ContextError struct {
	Tokens int // the prompt
	Limit  int // the model's max_position_embeddings
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("the prompt is %d tokens and this model reads at most %d", e.Tokens, e.Limit)
}

func (e *ContextError) Is(target error) bool { return target == ErrContextFull }

// ContextLength is the most positions the model reads (max_position_embeddings);
// 0 when the config sets no limit.
func (m *Model) ContextLength() int { return m.cfg.MaxPositionEmbeddings }

// checkContext refuses, before any compute, a prompt longer than the context.
func (m *Model) checkContext(prompt int) error {
	if limit := m.cfg.MaxPositionEmbeddings; limit > 0 && prompt > limit {
		return &ContextError{Tokens: prompt, Limit: limit}
	}
	return nil
}
