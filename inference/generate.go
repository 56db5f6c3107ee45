package inference

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
)

// GenerateOptions bounds and steers Generate.
type GenerateOptions struct {
	MaxTokens  int   // tokens to emit at most; 0: until a stop token or the context is full
	StopTokens []int // tokens that end generation (not emitted), usually the config's EOS ids
	Sampling   SampleOptions
	// LogProb fills Stats.LogProb: one more pass over the logits per token
	// (about 1 ms at a 150k vocabulary).
	LogProb bool
}

// Why generation ended.
const (
	StopToken     = "stop_token" // a stop token was sampled
	StopEmit      = "emit"       // emit asked to stop
	StopMaxTokens = "max_tokens"
	StopContext   = "context" // max_position_embeddings reached
	StopCancelled = "cancelled"
)

// Stats describes one Generate call.
type Stats struct {
	PromptTokens     int // tokens in the prompt
	ReusedTokens     int // of those, served from the session's cache
	GeneratedTokens  int // tokens emitted
	TimeToFirstToken time.Duration
	PrefillTime      time.Duration // computing the prompt's new tokens
	DecodeTime       time.Duration // the forward passes after the first token
	PrefillTPS       float64       // new prompt tokens per second
	DecodeTPS        float64       // decode forward passes per second
	PeakMemory       int64         // bytes, as the backend reports them (0 where it cannot)
	KVBytes          int64         // the cache's size at the end
	AdapterVersion   uint64        // the model's adapter version the last token was computed with
	StopReason       string
	// LogProb (with GenerateOptions.LogProb) is the sum over the emitted
	// tokens of log p(token) under the model's own distribution (before temperature and the other sampling
	// filters): exp(LogProb/GeneratedTokens) is the reply's mean token
	// probability, the raw confidence feedback calibrates.
	LogProb float64
}

// TokenProbability is the geometric mean probability of the emitted tokens
// (1 when none were).
func (s Stats) TokenProbability() float64 {
	if s.GeneratedTokens == 0 {
		return 1
	}
	return math.Exp(s.LogProb / float64(s.GeneratedTokens))
}

// logProb is log softmax(row)[tok].
func logProb(row []float32, tok int) float64 {
	hi := float32(math.Inf(-1))
	for _, v := range row {
		hi = max(hi, v)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v - hi))
	}
	return float64(row[tok]-hi) - math.Log(sum)
}

// Generate continues sess with prompt and streams sampled tokens to emit, one decode
// step per token, until a stop token, emit returning true, MaxTokens, the model's
// context limit, or ctx's cancellation (then it returns ctx.Err() with the stats so
// far). The session keeps the prompt and every emitted token but the last, ready for
// the next turn's Prefill to reuse. Each forward holds the model's adapter read lock,
// so adapters may change between two decode steps, never during one; the step after
// a change recomputes the context with the new adapters.
func Generate(ctx context.Context, sess *Session, prompt []int, opts GenerateOptions, emit func(token int) (stop bool)) (st Stats, err error) {
	st.PromptTokens = len(prompt)
	if opts.MaxTokens < 0 {
		return st, fmt.Errorf("inference: max tokens %d, want ≥ 0 (0: until a stop token or the context is full)", opts.MaxTokens)
	}
	sampler, err := NewSampler(opts.Sampling)
	if err != nil {
		return st, err
	}
	b := sess.m.b
	peak := func() {
		if _, p, ok := mx.Memory(b); ok {
			st.PeakMemory = max(st.PeakMemory, p)
		}
	}
	defer func() { st.KVBytes, st.AdapterVersion = sess.cache.Bytes(), sess.version }()
	if err := sess.m.checkContext(len(prompt)); err != nil {
		return st, err
	}
	if err := ctx.Err(); err != nil {
		st.StopReason = StopCancelled
		return st, err
	}

	start := time.Now()
	logits, reused, err := sess.Prefill(prompt)
	if err != nil {
		return st, err
	}
	st.ReusedTokens = reused
	st.PrefillTime = time.Since(start)
	st.PrefillTPS = rate(len(prompt)-reused, st.PrefillTime)
	peak()

	history := slices.Clone(prompt) // for the repetition penalty
	limit := sess.m.cfg.MaxPositionEmbeddings
	var decodeStart time.Time
	steps := 0
	for {
		row, err := logits.Float32s()
		if err != nil {
			return st, fmt.Errorf("inference: logits: %w", err)
		}
		tok := sampler.Sample(row, history)
		if st.TimeToFirstToken == 0 {
			st.TimeToFirstToken = time.Since(start)
			decodeStart = time.Now()
		}
		if slices.Contains(opts.StopTokens, tok) {
			st.StopReason = StopToken
			break
		}
		st.GeneratedTokens++
		if opts.LogProb {
			st.LogProb += logProb(row, tok)
		}
		history = append(history, tok)
		if emit(tok) {
			st.StopReason = StopEmit
			break
		}
		if opts.MaxTokens > 0 && st.GeneratedTokens >= opts.MaxTokens {
			st.StopReason = StopMaxTokens
			break
		}
		if limit > 0 && sess.cache.Len()+1 > limit {
			st.StopReason = StopContext
			break
		}
		if err := ctx.Err(); err != nil {
			st.StopReason = StopCancelled
			st.DecodeTime = time.Since(decodeStart)
			st.DecodeTPS = rate(steps, st.DecodeTime)
			return st, err
		}
		if logits, err = sess.Append([]int{tok}); err != nil {
			return st, err
		}
		steps++
		peak()
	}
	st.DecodeTime = time.Since(decodeStart)
	st.DecodeTPS = rate(steps, st.DecodeTime)
	return st, nil
}

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
