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
//
// The cache is only as good as the adapters it was computed with: when the model's
// adapter version has changed since, Prefill starts over and Append recomputes what
// the session holds, so a session never mixes keys and values of two versions. Each
// forward holds the model's adapter read lock (see adapter.go). A Session itself is
// for one goroutine at a time.
type Session struct {
	m       *Model
	cache   *Cache
	tokens  []int  // tokens the cache holds, in order
	version uint64 // the adapter version the cache was computed with
}

// NewSession starts an empty session with m.
func NewSession(m *Model) *Session {
	return &Session{m: m, cache: NewCache(m), version: m.AdapterVersion()}
}

// NewSessionWith starts an empty session with m whose cache stores keys and
// values as o says (a quantized KV cache).
func NewSessionWith(m *Model, o CacheOptions) (*Session, error) {
	c, err := NewCacheWith(m, o)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, cache: c, version: m.AdapterVersion()}, nil
}

// Model returns the session's model.
func (s *Session) Model() *Model { return s.m }

// Cache returns the session's cache.
func (s *Session) Cache() *Cache { return s.cache }

// Tokens returns the tokens the cache holds.
func (s *Session) Tokens() []int { return slices.Clone(s.tokens) }

// AdapterVersion returns the model's adapter version the cache was computed with.
func (s *Session) AdapterVersion() uint64 { return s.version }

// Reset forgets everything.
func (s *Session) Reset() {
	s.cache.Reset()
	s.tokens = s.tokens[:0]
}

// Prefill makes the session hold prompt and returns the logits (vocab) after its
// last token and how many leading tokens were reused from the cache (none when the
// adapters changed since it was computed). At least the last token is always
// recomputed, since its logits were not kept.
func (s *Session) Prefill(prompt []int) (logits *mx.Array, reused int, err error) {
	if len(prompt) == 0 {
		return nil, 0, errors.New("inference: empty prompt")
	}
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	return s.prefill(prompt)
}

// prefill is Prefill under the read lock.
func (s *Session) prefill(prompt []int) (logits *mx.Array, reused int, err error) {
	if v := s.m.AdapterVersion(); v != s.version {
		s.Reset()
		s.version = v
	}
	reused = commonPrefix(s.tokens, prompt)
	reused = min(reused, len(prompt)-1)
	s.cache.Trim(reused)
	s.tokens = s.tokens[:reused]
	for start := reused; start < len(prompt); start += prefillChunk {
		chunk := prompt[start:min(start+prefillChunk, len(prompt))]
		if logits, err = s.extend(chunk); err != nil {
			return nil, reused, err
		}
	}
	return logits, reused, nil
}

// Append runs tokens after what the session holds and returns the logits (vocab)
// after the last one. The logits are evaluated (lazy backends compute them here).
// If the adapters changed since the session's cache was computed, everything it
// holds is computed again first.
func (s *Session) Append(tokens []int) (*mx.Array, error) {
	if len(tokens) == 0 {
		return nil, errors.New("inference: no tokens to append")
	}
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	if s.m.AdapterVersion() != s.version && len(s.tokens) > 0 {
		logits, _, err := s.prefill(slices.Concat(s.tokens, tokens))
		return logits, err
	}
	s.version = s.m.AdapterVersion()
	return s.extend(tokens)
}

// extend runs tokens after the cache under the read lock.
func (s *Session) extend(tokens []int) (*mx.Array, error) {
	ids, err := s.m.Tokens(tokens)
	if err != nil {
		return nil, err
	}
	// One forward pass is hundreds of ops: issued where the backend runs
	// them (mx.Run), they skip a hand-over each on MLX.
	var logits *mx.Array
	mx.Run(s.m.b, func() {
		logits = s.m.ForwardLast(ids, s.cache)
		err = mx.Eval(logits)
	})
	if err != nil {
		s.cache.Trim(len(s.tokens))
		return nil, fmt.Errorf("inference: forward: %w", err)
	}
	s.tokens = append(s.tokens, tokens...)
	return mx.Reshape(logits, s.m.cfg.VocabSize), nil
}

// queue runs the token array tok (1, 1) after the session and draws the next
// token from the logits, all queued on the backend (mx.AsyncEval) and nothing
// read back: generateQueued's step. The cache holds tok's keys and values
// once it returns; the caller adds tok to the session's tokens when it has
// read it, or trims the cache back. queued is false, with nothing run, when
// the adapters changed since the cache was computed.
func (s *Session) queue(tok *mx.Array, sampler *Sampler, logProb bool) (next, lp *mx.Array, queued bool, err error) {
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	if s.m.AdapterVersion() != s.version {
		return nil, nil, false, nil
	}
	mx.Run(s.m.b, func() {
		logits := s.m.ForwardLast(tok, s.cache)
		next, lp = sampler.deviceDraw(mx.Reshape(logits, s.m.cfg.VocabSize), logProb)
		err = mx.AsyncEval(nonNil(next, lp)...)
	})
	if err != nil {
		s.cache.Trim(len(s.tokens))
		return nil, nil, false, fmt.Errorf("inference: forward: %w", err)
	}
	return next, lp, true, nil
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
