package inference

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	return s.PrefillContext(context.Background(), prompt)
}

// PrefillContext is Prefill that stops at ctx's cancellation, checked between
// chunks of prefillChunk tokens, and returns ctx.Err(): the session then holds
// the prompt's first chunks, as a later Prefill reuses them.
func (s *Session) PrefillContext(ctx context.Context, prompt []int) (logits *mx.Array, reused int, err error) {
	if len(prompt) == 0 {
		return nil, 0, errors.New("inference: empty prompt")
	}
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	return s.prefill(ctx, prompt)
}

// prefill is PrefillContext under the read lock.
func (s *Session) prefill(ctx context.Context, prompt []int) (logits *mx.Array, reused int, err error) {
	if v := s.m.AdapterVersion(); v != s.version {
		s.Reset()
		s.version = v
	}
	reused = commonPrefix(s.tokens, prompt)
	reused = min(reused, len(prompt)-1)
	s.cache.Trim(reused)
	s.tokens = s.tokens[:reused]
	for start := reused; start < len(prompt); start += prefillChunk {
		if err := ctx.Err(); err != nil {
			return nil, reused, err
		}
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
		logits, _, err := s.prefill(context.Background(), slices.Concat(s.tokens, tokens))
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
		logits = s.m.forwardLast(ids, s.cache, len(tokens) == 1 && stagesSteps(s.m))
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
// the adapters changed since the cache was computed. Once the step is queued,
// then runs where the backend issues its ops, in the same hand-over (reading
// tok back costs no second one).
func (s *Session) queue(tok *mx.Array, sampler *Sampler, logProb bool, then func()) (next, lp *mx.Array, queued bool, err error) {
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	if s.m.AdapterVersion() != s.version {
		return nil, nil, false, nil
	}
	mx.Run(s.m.b, func() {
		logits := s.m.forwardLast(tok, s.cache, stagesSteps(s.m))
		next, lp = sampler.deviceDraw(mx.Reshape(logits, s.m.cfg.VocabSize), logProb)
		if err = mx.AsyncEval(nonNil(next, lp)...); err == nil {
			then()
		}
	})
	if err != nil {
		s.cache.Trim(len(s.tokens))
		return nil, nil, false, fmt.Errorf("inference: forward: %w", err)
	}
	return next, lp, true, nil
}

// stageMode overrides stagesSteps for tests and benchmarks: 1 always (on a
// backend that is not lazy, queueing a block does nothing), −1 never, 0 as
// stagesSteps decides.
var stageMode int

// stagesSteps reports whether a decoding step of m is queued block by block
// (hiddenWith's stage) rather than whole: on a lazy backend computing on the
// CPU, when the model is quantized.
//
// MLX lets the queueing thread run only about a hundred ops (ten tasks) ahead
// of its stream thread, so while the next step was built, from the token just
// read back, the stream had those few ops left and then nothing: on the 4-bit
// demo it sat idle for a third of each token (per-thread CPU time). Queued
// block by block, block 0 computes while block 1 is built. That pays where
// the stream thread computes alone, as MLX's quantized products do on the
// CPU; float32 products go to BLAS on every core, and a builder working beside
// them takes one away (the float32 demo decoded at 0.89 of the whole steps'
// speed staged). On a GPU the step goes whole, as mlx-lm queues it: there each
// queue commits a command buffer, and that has not been measured.
func stagesSteps(m *Model) bool {
	if stageMode != 0 {
		return stageMode > 0
	}
	if _, ok := m.b.(mx.AsyncEvaluator); !ok {
		return false
	}
	return deviceOf(m.b) == "cpu" && m.cfg.Quantization != nil
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// SeedFrom makes the empty session s hold what src holds, computing only
// blocks k and up: src's cache must keep the hidden states entering block k
// (Cache.KeepHidden), and s's model must compute what src's does below block
// k, the same weights and adapters there (s's a fork of src's with an adapter
// on the last blocks, as test-time training makes). Keys and values of the
// blocks below k are shared with src, and the rest come from its kept hidden
// states through s's own blocks, so s then holds what a prefill of src's
// tokens would have given it, at the cost of the blocks from k. s keeps
// hidden states at k too. It returns the positions seeded.
func (s *Session) SeedFrom(src *Session, k int) (int, error) {
	return s.SeedFromContext(context.Background(), src, k)
}

// SeedFromContext is SeedFrom that stops at ctx's cancellation, checked between
// chunks of prefillChunk positions; s is then left empty and it returns
// ctx.Err().
func (s *Session) SeedFromContext(ctx context.Context, src *Session, k int) (int, error) {
	if s.cache.Len() > 0 {
		return 0, errors.New("inference: seed: the session is not empty")
	}
	if src.cache.keepAt != k || k <= 0 {
		return 0, fmt.Errorf("inference: seed from block %d: the source keeps the input of block %d", k, src.cache.keepAt)
	}
	if len(s.cache.layers) != len(src.cache.layers) || s.cache.opts != src.cache.opts {
		return 0, errors.New("inference: seed: the caches are laid out differently")
	}
	n := src.cache.Len()
	if n == 0 || src.cache.kept == nil || src.cache.kept.Dim(1) != n {
		return 0, errors.New("inference: seed: the source holds no hidden states to start from")
	}
	s.m.ad.mu.RLock()
	defer s.m.ad.mu.RUnlock()
	if src.m != s.m {
		src.m.ad.mu.RLock()
		defer src.m.ad.mu.RUnlock()
	}
	if src.version != src.m.AdapterVersion() {
		return 0, errors.New("inference: seed: the source's cache predates its model's adapters")
	}
	if !sameBelow(src.m, s.m, k) {
		return 0, fmt.Errorf("inference: seed: the models differ below block %d", k)
	}
	s.version = s.m.AdapterVersion()
	for i := range k {
		src.cache.layers[i].shared = true
		l := src.cache.layers[i]
		l.hook = s.cache.layers[i].hook
		s.cache.layers[i] = l
	}
	s.cache.keepAt, s.cache.kept = k, src.cache.kept
	var err error
	mx.Run(s.m.b, func() {
		for start := 0; start < n && err == nil; start += prefillChunk {
			if err = ctx.Err(); err != nil {
				return
			}
			h := mx.SliceAxis(src.cache.kept, 1, start, min(start+prefillChunk, n))
			for i := k; i < len(s.m.layers) && h.Err() == nil; i++ {
				h = s.m.layers[i].Forward(h, s.cache.layer(i))
			}
			err = mx.Eval(h)
		}
	})
	if err != nil {
		s.Reset()
		if ctx.Err() != nil {
			return 0, err
		}
		return 0, fmt.Errorf("inference: seed: %w", err)
	}
	s.tokens = slices.Clone(src.tokens)
	return n, nil
}

// sameBelow reports whether a and b compute the same below block k: the same
// embedding and block weights there, and the same adapters on them.
func sameBelow(a, b *Model, k int) bool {
	if a == b {
		return true
	}
	below := func(name string) bool {
		var i int
		if _, err := fmt.Sscanf(name, "model.layers.%d.", &i); err == nil {
			return i < k
		}
		return strings.HasPrefix(name, "model.embed_tokens")
	}
	pa, pb := a.Params(), b.Params()
	for name, x := range pa {
		if below(name) && pb[name] != x {
			return false
		}
	}
	adapters := func(m *Model) map[string][]*LoRA {
		out := map[string][]*LoRA{}
		m.Linears(func(path string, l *Linear) {
			if below(path + ".") {
				out[path] = l.adapters
			}
		})
		return out
	}
	aa, ab := adapters(a), adapters(b)
	for path, la := range aa {
		if !slices.Equal(la, ab[path]) {
			return false
		}
	}
	return len(aa) == len(ab)
}
