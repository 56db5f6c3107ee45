package inference

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/tokenizer"
)

// StopString is the Stats.StopReason of a reply that reached one of its stop strings.
const StopString = "stop_string"

// Replier answers in text: it renders a conversation with the model's chat template,
// tokenizes it, generates, and decodes the tokens into text as they come, ending at
// the model's stop tokens and stop strings. The CLI, the GUI's chat and the
// adaptation loops share it. A Replier is safe for concurrent use with different
// Sessions.
type Replier struct {
	Model     *Model
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template // nil: no chat template (Reply refuses, ReplyText works)
	// StopTokens end a reply and are not part of it: the config's, the tokenizer's
	// and the template's EOS ids.
	StopTokens []int
	// StopStrings end a reply and are not part of it: the template's.
	StopStrings []string
}

// NewReplier makes a Replier with the stop tokens and strings m, tok and tmpl (which
// may be nil) name.
func NewReplier(m *Model, tok *tokenizer.Tokenizer, tmpl *chat.Template) *Replier {
	r := &Replier{Model: m, Tokenizer: tok, Template: tmpl}
	cfg := m.Config()
	ids := slices.Concat(cfg.StopTokens(), tok.EOS())
	if tmpl != nil {
		ids = append(ids, tmpl.EOSTokens()...)
		r.StopStrings = tmpl.StopStrings()
	}
	for _, id := range ids {
		if !slices.Contains(r.StopTokens, id) {
			r.StopTokens = append(r.StopTokens, id)
		}
	}
	return r
}

// LoadReplier reads the tokenizer and chat template of the model folder dir (see
// tokenizer.Load and chat.LoadTemplate; a model without a template gets ChatML,
// which Template.Fallback reports) and makes a Replier for m.
func LoadReplier(m *Model, dir string) (*Replier, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.LoadTemplate(dir)
	if err != nil {
		return nil, err
	}
	return NewReplier(m, tok, tmpl), nil
}

// ReplyOptions bound and steer one reply.
type ReplyOptions struct {
	MaxTokens int // tokens to generate at most; 0: until a stop or the context is full
	Sampling  SampleOptions
	// Render is passed to the chat template (Reply); AddGenerationPrompt is always
	// set.
	Render chat.RenderOptions
	// AddSpecialTokens lets the tokenizer add its special tokens (BOS) to a
	// ReplyText prompt, as a plain completion prompt wants. Chat templates write
	// their own.
	AddSpecialTokens bool
	// StopStrings end the reply too, besides the Replier's.
	StopStrings []string
	// LogProb fills Stats.LogProb (GenerateOptions.LogProb).
	LogProb bool
	// IgnoreStops generates through stop tokens and stop strings until MaxTokens
	// (special tokens are still left out of the text): a look at what the model
	// writes after its end of text.
	IgnoreStops bool
}

// Prompt renders msgs with the chat template, ending with the opening of the
// assistant's turn, and tokenizes the result.
func (r *Replier) Prompt(msgs []chat.Message, opts chat.RenderOptions) ([]int, error) {
	if r.Template == nil {
		return nil, errors.New("inference: reply: the model has no chat template")
	}
	opts.AddGenerationPrompt = true
	text, err := r.Template.Render(msgs, opts)
	if err != nil {
		return nil, fmt.Errorf("inference: reply: %w", err)
	}
	// The template writes BOS itself where the model wants one.
	return r.Tokenizer.Encode(text, false)
}

// Reply answers the conversation msgs in sess (nil: a new session): see
// ReplyTokens.
func (r *Replier) Reply(ctx context.Context, sess *Session, msgs []chat.Message, opts ReplyOptions, onText func(string)) (string, Stats, error) {
	ids, err := r.Prompt(msgs, opts.Render)
	if err != nil {
		return "", Stats{}, err
	}
	return r.ReplyTokens(ctx, sess, ids, opts, onText)
}

// ReplyText continues prompt as it is, without the chat template: see ReplyTokens.
func (r *Replier) ReplyText(ctx context.Context, sess *Session, prompt string, opts ReplyOptions, onText func(string)) (string, Stats, error) {
	ids, err := r.Tokenizer.Encode(prompt, opts.AddSpecialTokens)
	if err != nil {
		return "", Stats{}, fmt.Errorf("inference: reply: %w", err)
	}
	return r.ReplyTokens(ctx, sess, ids, opts, onText)
}

// ReplyTokens generates after the prompt ids in sess (nil: a new session of
// r.Model) and returns the reply's text. onText (may be nil) receives the text as it
// is decoded, in pieces of whole UTF-8 characters; their concatenation is the
// returned text. The reply ends before a stop token or the first stop string, which
// are never handed out: text that might begin a stop string is held back until it
// cannot. When ctx is cancelled the text so far is returned with ctx's error and
// Stats.StopReason StopCancelled.
func (r *Replier) ReplyTokens(ctx context.Context, sess *Session, ids []int, opts ReplyOptions, onText func(string)) (string, Stats, error) {
	if sess == nil {
		sess = NewSession(r.Model)
	}
	gen := GenerateOptions{MaxTokens: opts.MaxTokens, StopTokens: r.StopTokens, Sampling: opts.Sampling, LogProb: opts.LogProb}
	st := newStopText(r.Tokenizer, slices.Concat(r.StopStrings, opts.StopStrings), onText)
	if opts.IgnoreStops {
		gen.StopTokens, st.stops = nil, nil
	}
	stats, err := Generate(ctx, sess, ids, gen, st.add)
	if st.stopped {
		stats.StopReason = StopString
	} else {
		st.finish()
	}
	return st.out.String(), stats, err
}

// stopText turns generated tokens into text, cut before the first stop string.
type stopText struct {
	dec     *tokenizer.StreamDecoder
	stops   []string
	pending string // decoded, not yet handed out: it may begin a stop string
	out     strings.Builder
	onText  func(string)
	stopped bool
}

func newStopText(tok *tokenizer.Tokenizer, stops []string, onText func(string)) *stopText {
	s := &stopText{dec: tok.NewDecoder(true), onText: onText}
	for _, w := range stops {
		if w != "" {
			s.stops = append(s.stops, w)
		}
	}
	return s
}

// add takes one token and reports whether a stop string was reached.
func (s *stopText) add(tok int) bool {
	s.pending += s.dec.Add(tok)
	s.stopped = s.flush(false)
	return s.stopped
}

// finish hands out what is left.
func (s *stopText) finish() {
	s.pending += s.dec.Flush()
	s.flush(true)
}

// flush hands out the pending text up to the first stop string (then it reports
// true), or all of it but a tail that may begin one.
func (s *stopText) flush(final bool) bool {
	text := s.pending
	cut := -1
	for _, w := range s.stops {
		if i := strings.Index(text, w); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		s.emit(text[:cut])
		s.pending = ""
		return true
	}
	keep := 0
	if !final {
		keep = heldTail(text, s.stops)
	}
	s.emit(text[:len(text)-keep])
	s.pending = text[len(text)-keep:]
	return false
}

// heldTail is the length of the longest end of text that begins a stop string. It
// starts on a character boundary, as every stop string does, so what is handed out
// before it is whole characters.
func heldTail(text string, stops []string) int {
	held := 0
	for _, w := range stops {
		for n := min(len(w)-1, len(text)); n > held; n-- {
			if strings.HasSuffix(text, w[:n]) {
				held = n
				break
			}
		}
	}
	return held
}

func (s *stopText) emit(text string) {
	if text == "" {
		return
	}
	s.out.WriteString(text)
	if s.onText != nil {
		s.onText(text)
	}
}

// RoundedPrefill names the rounded activations the prompt's prefill multiplied on, in
// a fixed order: "int8" (Int8Prefill), "bf16" (BF16Prefill); none where it was exact.
func (st Stats) RoundedPrefill() []string {
	var r []string
	if st.Int8Prefill {
		r = append(r, "int8")
	}
	if st.BF16Prefill {
		r = append(r, "bf16")
	}
	return r
}

// String is the one-line summary the CLI prints after a reply.
func (st Stats) String() string {
	decodeTag, prefillTag := "", ""
	if st.Int8Decode {
		decodeTag = " (int8)"
	}
	if r := st.RoundedPrefill(); len(r) > 0 {
		prefillTag = " (" + strings.Join(r, ", ") + ")"
	}
	return fmt.Sprintf("[%d prompt tokens (%d reused), %d generated, first token %d ms, prefill %.1f tok/s%s, decode %.1f tok/s%s, KV cache %.1f MiB, peak %.0f MiB, %s]",
		st.PromptTokens, st.ReusedTokens, st.GeneratedTokens, st.TimeToFirstToken.Milliseconds(), st.PrefillTPS, prefillTag, st.DecodeTPS, decodeTag,
		float64(st.KVBytes)/(1<<20), float64(st.PeakMemory)/(1<<20), st.StopReason)
}
