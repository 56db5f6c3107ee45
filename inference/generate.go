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
	Int8Decode       bool          // decode steps multiplied quantized weights on 8-bit activations (Model.SetInt8Decode)
	Int8Prefill      bool          // and so did the prompt's prefill (Model.SetInt8Prefill)
	BF16Prefill      bool          // the prompt's prefill multiplied bfloat16 weights on bfloat16 activations (Model.SetBF16Prefill)
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
	// Said only of a call that computes: a refused prompt was read no way at all.
	st.Int8Decode, st.Int8Prefill, st.BF16Prefill = sess.m.actRuns()

	start := time.Now()
	logits, reused, err := sess.PrefillContext(ctx, prompt)
	if err != nil {
		if ctx.Err() != nil {
			st.StopReason = StopCancelled
		}
		return st, err
	}
	st.ReusedTokens = reused
	st.PrefillTime = time.Since(start)
	st.PrefillTPS = rate(len(prompt)-reused, st.PrefillTime)
	peak()

	if queues(b, opts.Sampling) {
		err := generateQueued(ctx, sess, logits, sampler, opts, emit, &st, start, peak)
		return st, err
	}
	history := slices.Clone(prompt) // for the repetition penalty
	limit := sess.m.cfg.MaxPositionEmbeddings
	var decodeStart time.Time
	steps := 0
	var row []float32 // the logits, read into one buffer every step
	for {
		var err error
		row, err = logits.Float32sInto(row)
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

// queueMode overrides when Generate queues steps: 1 on every backend (tests:
// an eager backend computes each op as it is issued, so the loop's
// bookkeeping is what they see), −1 never (benchmarks: the plain loop to
// compare with), 0 as queues decides.
var queueMode int

// queues reports whether Generate queues each decode step before reading back
// the token it starts from: on a backend that computes while the caller goes
// on (MLX), with sampling the device can do. Top-k and top-p sort the
// vocabulary on the device; where the device is the CPU, that sort and the
// dozen ops around it cost more than the overlap saves (the demo model on
// MLX's CPU device: 209–263 tok/s queued, 245–287 plain, in one run), so
// there the plain loop samples them on the host.
func queues(b mx.Backend, o SampleOptions) bool {
	if queueMode != 0 {
		return queueMode > 0 && o.onDevice()
	}
	if _, async := b.(mx.AsyncEvaluator); !async || !o.onDevice() {
		return false
	}
	sorts := o.Temperature > 0 && (o.TopK > 0 || (o.TopP > 0 && o.TopP < 1))
	return !sorts || deviceOf(b) != "cpu"
}

// deviceOf is the device b computes on, "cpu" or "gpu", where it says (MLX);
// "" where it does not.
func deviceOf(b mx.Backend) string {
	if d, ok := b.(interface{ Device() string }); ok {
		return d.Device()
	}
	return ""
}

// generateQueued is Generate's decode loop on a lazy backend, the way mlx-lm
// runs it: each token is drawn on the device (deviceDraw), and the forward
// pass it feeds, with the draw after it, is queued before the token is read
// back, so the device computes the next step while the host waits for this
// token, emits it and checks the stops. A step is queued only when it can be
// needed (not past MaxTokens or the context); after a stop token or emit's
// stop, the one queued step is dropped from the cache. When the adapters
// change, the next step is not queued but recomputed through Append.
func generateQueued(ctx context.Context, sess *Session, logits *mx.Array, sampler *Sampler, opts GenerateOptions, emit func(int) bool, st *Stats, start time.Time, peak func()) error {
	b := sess.m.b
	limit := sess.m.cfg.MaxPositionEmbeddings
	var tok, lp *mx.Array
	draw := func(logits *mx.Array) error {
		var err error
		mx.Run(b, func() {
			tok, lp = sampler.deviceDraw(logits, opts.LogProb)
			err = mx.AsyncEval(nonNil(tok, lp)...)
		})
		return err
	}
	if err := draw(logits); err != nil {
		return fmt.Errorf("inference: sampling: %w", err)
	}
	var decodeStart time.Time
	steps := 0
	stop := func(reason string) {
		st.StopReason = reason
		st.DecodeTime = time.Since(decodeStart)
		st.DecodeTPS = rate(steps, st.DecodeTime)
	}
	drop := func() { sess.cache.Trim(len(sess.tokens)) } // a queued step's keys and values
	for {
		// tok (and its log-probability) read back, and the memory peak: on the
		// backend's thread right after the next step is queued, so that a token
		// costs one hand-over to it (each wakes a thread).
		var ids []int32
		var logProb float32
		var readErr, lpErr error
		read := func() {
			ids, readErr = tok.Int32s()
			if readErr == nil && opts.LogProb {
				logProb, lpErr = lp.Item()
			}
			peak()
		}
		// The step after tok, queued unless it cannot be needed.
		var next, nextLP *mx.Array
		queued := false
		if !(opts.MaxTokens > 0 && st.GeneratedTokens+1 >= opts.MaxTokens) && !(limit > 0 && sess.cache.Len()+1 > limit) {
			var err error
			if next, nextLP, queued, err = sess.queue(tok, sampler, opts.LogProb, read); err != nil {
				return err
			}
		}
		if !queued {
			read()
		}
		if readErr != nil {
			drop()
			return fmt.Errorf("inference: sampling: %w", readErr)
		}
		id := int(ids[0])
		if st.TimeToFirstToken == 0 {
			st.TimeToFirstToken = time.Since(start)
			decodeStart = time.Now()
		}
		if slices.Contains(opts.StopTokens, id) {
			drop()
			stop(StopToken)
			return nil
		}
		st.GeneratedTokens++
		if opts.LogProb {
			if lpErr != nil {
				drop()
				return fmt.Errorf("inference: log-probability: %w", lpErr)
			}
			st.LogProb += float64(logProb)
		}
		if emit(id) {
			drop()
			stop(StopEmit)
			return nil
		}
		if opts.MaxTokens > 0 && st.GeneratedTokens >= opts.MaxTokens {
			drop()
			stop(StopMaxTokens)
			return nil
		}
		if limit > 0 && sess.cache.Len()+1 > limit && !queued {
			stop(StopContext)
			return nil
		}
		if err := ctx.Err(); err != nil {
			drop()
			stop(StopCancelled)
			return err
		}
		if queued && sess.m.AdapterVersion() != sess.version {
			// The adapters changed while id was read and emitted: the queued
			// step used the old ones, so it goes, with its draw.
			drop()
			sampler.unread()
			queued = false
		}
		if queued {
			sess.tokens = append(sess.tokens, id)
			tok, lp = next, nextLP
		} else {
			// The adapters changed: Append recomputes the session with them.
			logits, err := sess.Append([]int{id})
			if err != nil {
				return err
			}
			if err := draw(logits); err != nil {
				return fmt.Errorf("inference: sampling: %w", err)
			}
		}
		steps++
	}
}

// nonNil drops the nil arrays of xs.
func nonNil(xs ...*mx.Array) []*mx.Array {
	out := xs[:0:0]
	for _, x := range xs {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
