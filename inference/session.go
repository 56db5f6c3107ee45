package inference

import (
	"errors"
	"fmt"
	"slices"

	mx "github.com/inloop/inloop/mlxbridge"
)

// prefillChunk bounds how many prompt tokens one forward pass takes, so attention's
// (L × S) score blocks stay small for long prompts.
const prefillChunk = 512

// Session is one conversation with a model: the tokens whose keys and values its
// cache holds. Between chat turns the next prompt usually extends the previous one
// (the whole conversation, re-rendered by the chat template), so Prefill keeps the
// longest common prefix and computes only the rest.
type Session struct {
	m      *Model
	cache  *Cache
	tokens []int // tokens the cache holds, in order
}

// NewSession starts an empty session with m.
func NewSession(m *Model) *Session { return &Session{m: m, cache: NewCache(m)} }

// Model returns the session's model.
func (s *Session) Model() *Model { return s.m }

// Cache returns the session's cache.
func (s *Session) Cache() *Cache { return s.cache }

// Tokens returns the tokens the cache holds.
func (s *Session) Tokens() []int { return slices.Clone(s.tokens) }

// Reset forgets everything.
func (s *Session) Reset() {
	s.cache.Reset()
	s.tokens = s.tokens[:0]
}

// Prefill makes the session hold prompt and returns the logits (vocab) after its
// last token and how many leading tokens were reused from the cache. At least the
// last token is always recomputed, since its logits were not kept.
func (s *Session) Prefill(prompt []int) (logits *mx.Array, reused int, err error) {
	if len(prompt) == 0 {
		return nil, 0, errors.New("inference: empty prompt")
	}
	reused = commonPrefix(s.tokens, prompt)
	reused = min(reused, len(prompt)-1)
	s.cache.Trim(reused)
	s.tokens = s.tokens[:reused]
	for start := reused; start < len(prompt); start += prefillChunk {
		chunk := prompt[start:min(start+prefillChunk, len(prompt))]
		if logits, err = s.Append(chunk); err != nil {
			return nil, reused, err
		}
	}
	return logits, reused, nil
}

// Append runs tokens after what the session holds and returns the logits (vocab)
// after the last one. The logits are evaluated (lazy backends compute them here).
func (s *Session) Append(tokens []int) (*mx.Array, error) {
	ids, err := s.m.Tokens(tokens)
	if err != nil {
		return nil, err
	}
	logits := s.m.ForwardLast(ids, s.cache)
	if err := mx.Eval(logits); err != nil {
		s.cache.Trim(len(s.tokens))
		return nil, fmt.Errorf("inference: forward: %w", err)
	}
	s.tokens = append(s.tokens, tokens...)
	return mx.Reshape(logits, s.m.cfg.VocabSize), nil
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
