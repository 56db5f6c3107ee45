// Package ror is reinforce-or-retrain: a decision model (training/decide) that
// learns from the thumbs of the people who use it, one confirmed or corrected
// answer at a time, checking each change against an anchor set of what it
// already knew.
//
//   - 👍 reinforces: the example joins a replay buffer and the calibration
//     history. No weight changes.
//   - 👎 with the right answer retrains: one SGD step on the correction mixed
//     with a few replay examples, more (up to MaxSteps) only while the model
//     still prefers another answer; then an anchor set — held-out confirmed
//     examples, never trained on — is scored, and the step is rolled back when
//     its accuracy fell by more than AnchorMargin.
//   - 👎 alone records: the answer's confidence bucket is lowered (Bucket) and
//     the answer is offered for escalation.
//
// The gate: a decision whose feedback-adjusted confidence is at or above the
// threshold is acted on, and a 👍 on it only reinforces; below it, a person is
// asked (Decision.Escalate from Learner.Decide).
//
// The Learner answers from its own copy of the decision model — the backbone
// forked, the decision adapter and the head read back from what Model.Save
// writes — and leaves the *decide.Model it was given as it was (decide keeps
// its weights unexported). Every accepted step is a version of that copy — the
// head's weights and the adapter — numbered by the Learner; Undo and
// RestoreVersion install an earlier one bit for bit, and Save writes the
// current one as a decision-model folder decide.Load reads. Rollback never
// installs anything: the step is taken and checked on copies (a second fork,
// a copy of the head), and only a step that passes is put in front of Decide.
//
// By default only the head learns. With the backbone frozen, the features the
// head reads (decide's h_q, h_{m_k} and mean(h_state)) of every correction,
// replay and anchor example are computed once and cached, so a step and a
// rollback check are small matrix products — about 0.15 ms each on the demo
// model (BenchmarkRoR), where a step through the backbone takes half a second
// and streaming 20 tokens 6 ms — and a bad correction can only move the
// decision boundary within the feature space the trained model already has.
// TrainAdapter steps the decision adapter as well; then every step and check
// runs the backbone.
package ror

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
)

// Defaults of Options.
const (
	DefaultMaxSteps = 3
	// DefaultLearningRate is the head's SGD rate. With the gradient clipped
	// to norm 1 it is how far (L2) one step may move the head: on the demo
	// model, 0.03 left most wrong tickets unflipped after 3 steps and 0.1
	// rolled back one correction in four; 0.05 flips most in 1–3 steps.
	DefaultLearningRate = 0.05
	// DefaultAdapterLearningRate is the adapter's rate with TrainAdapter (the
	// gradient of head and adapter clipped together): on the demo model 0.01
	// flipped a confidently wrong ticket in 3 steps, 0.005 did not.
	DefaultAdapterLearningRate = 0.01
	DefaultReplay              = 4
	DefaultReplayCap           = 512
	DefaultAnchorMargin        = 0.01
	DefaultPrior               = 10
	DefaultHistory             = 64
	DefaultClipNorm            = 1.0
	// Buckets is how many equal-width confidence buckets the calibration
	// history keeps per question.
	Buckets = 10
)

var (
	// ErrNothingToUndo is Undo's error when no change is left to undo.
	ErrNothingToUndo = errors.New("ror: nothing to undo")
	// ErrVersion reports a version the Learner does not hold.
	ErrVersion = errors.New("ror: version not in the history")
	// ErrHeadMismatch reports a decision model whose scores this package does
	// not reproduce: decide's head changed and adapt/ror/head.go must follow.
	ErrHeadMismatch = errors.New("ror: the decision model's scores differ from RoR's copy of its head")
)

// Options steer a Learner. The zero value takes the defaults.
type Options struct {
	// Threshold is the gate on the feedback-adjusted confidence: at or above
	// it a decision is acted on, below it a person is asked. 0 takes each
	// question's threshold from the model's calibration.
	Threshold float64
	// MaxSteps caps the steps of one correction (default 3): after the first,
	// another is taken only while the model still prefers another answer.
	MaxSteps int
	// LearningRate is the head's SGD rate (DefaultLearningRate);
	// AdapterLearningRate the adapter's, with TrainAdapter.
	LearningRate        float64
	AdapterLearningRate float64
	// TrainAdapter steps the decision adapter as well as the head (the model
	// must have one). Slower: every step and check runs the backbone.
	TrainAdapter bool
	// Replay is how many replay examples are mixed into each correction's
	// steps (default 4; -1 none); ReplayCap bounds the buffer, oldest out
	// first (default 512).
	Replay    int
	ReplayCap int
	// AnchorMargin: a step is rolled back when anchor accuracy falls by more
	// than this (default 0.01, one point).
	AnchorMargin float64
	// Prior is how many answers' worth of weight the model's own calibration
	// has in a bucket against the people's feedback (default 10); see Bucket.
	Prior float64
	// History is how many versions are kept besides the first (default 64);
	// the first, the model as New found it, is always kept.
	History int
	// ClipNorm caps a step's global gradient norm (default 1; -1 off).
	ClipNorm float64
	// Seed draws the replay examples.
	Seed uint64
}

func (o Options) withDefaults() Options {
	if o.MaxSteps == 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.AdapterLearningRate == 0 {
		o.AdapterLearningRate = DefaultAdapterLearningRate
	}
	if o.Replay == 0 {
		o.Replay = DefaultReplay
	}
	if o.ReplayCap == 0 {
		o.ReplayCap = DefaultReplayCap
	}
	if o.AnchorMargin == 0 {
		o.AnchorMargin = DefaultAnchorMargin
	}
	if o.Prior == 0 {
		o.Prior = DefaultPrior
	}
	if o.History == 0 {
		o.History = DefaultHistory
	}
	if o.ClipNorm == 0 {
		o.ClipNorm = DefaultClipNorm
	}
	return o
}

func (o Options) validate() error {
	switch {
	case !(o.Threshold >= 0 && o.Threshold <= 1):
		return fmt.Errorf("ror: threshold %g is not in [0, 1]", o.Threshold)
	case o.MaxSteps < 1:
		return fmt.Errorf("ror: max steps %d, want at least 1", o.MaxSteps)
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0) || !(o.AdapterLearningRate > 0) || math.IsInf(o.AdapterLearningRate, 0):
		return fmt.Errorf("ror: learning rates %g and %g must be positive", o.LearningRate, o.AdapterLearningRate)
	case o.Replay < -1 || o.ReplayCap < 1:
		return fmt.Errorf("ror: replay %d per step from a buffer of %d", o.Replay, o.ReplayCap)
	case !(o.AnchorMargin >= 0) || !(o.Prior > 0) || math.IsInf(o.Prior, 0):
		return fmt.Errorf("ror: anchor margin %g and prior %g", o.AnchorMargin, o.Prior)
	case o.History < 1:
		return fmt.Errorf("ror: history %d, want at least 1", o.History)
	}
	return nil
}

// Kind is what an Event did.
type Kind string

const (
	KindReinforce Kind = "reinforce" // 👍: replay buffer and calibration history; no weights
	KindRetrain   Kind = "retrain"   // 👎 with a correction: a step that passed the anchor check
	KindRollback  Kind = "rollback"  // 👎 with a correction: a step that failed it, undone
	KindRecord    Kind = "record"    // 👎 alone: calibration history, escalation
	KindUndo      Kind = "undo"      // the version before the last change, back
	KindRestore   Kind = "restore"   // a chosen version, back
)

// Event is what one call did, for the user's event log.
type Event struct {
	Kind     Kind   `json:"kind"`
	Question string `json:"question,omitempty"`
	// MS is the wall time of the whole call; StepMS of its gradient steps
	// (for a decision Learner, with their flip checks), FlipMS of a
	// ChatLearner's checks whether the model prefers the correction yet,
	// ReadMS of its reading the new examples through the blocks below the
	// adapter (once per example), CheckMS of the anchor check.
	MS      float64 `json:"ms"`
	ReadMS  float64 `json:"read_ms,omitempty"`
	StepMS  float64 `json:"step_ms,omitempty"`
	FlipMS  float64 `json:"flip_ms,omitempty"`
	CheckMS float64 `json:"check_ms,omitempty"`
	// VersionBefore and VersionAfter are the Learner's versions; equal when no
	// weights changed.
	VersionBefore uint64 `json:"version_before"`
	VersionAfter  uint64 `json:"version_after"`
	Steps         int    `json:"steps,omitempty"`
	// Loss is the corrections' mean cross-entropy before the first step and
	// LossAfter after the last.
	Loss      float64 `json:"loss,omitempty"`
	LossAfter float64 `json:"loss_after,omitempty"`
	// AnchorBefore is the anchor accuracy of the version before; AnchorAfter
	// of the step (rolled back or not), or of the version after. For a
	// ChatLearner it is the anchor replies' next-token accuracy (NaN while
	// the set is empty).
	AnchorBefore float64 `json:"anchor_before"`
	AnchorAfter  float64 `json:"anchor_after"`
	// Flipped: after the steps the model prefers every corrected answer.
	Flipped bool `json:"flipped,omitempty"`
	// Choice and Confidence are the model's answer and calibrated confidence
	// when the feedback came; Adjusted is the confidence reported after the
	// calibration history took the feedback in (Bucket).
	Choice     string  `json:"choice,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	Adjusted   float64 `json:"adjusted,omitempty"`
	Escalate   bool    `json:"escalate,omitempty"` // the answer goes to a person
	Detail     string  `json:"detail,omitempty"`
}

// Example is one confirmed answer: the option a person says is right for one
// question about one state.
type Example struct {
	State    string `json:"state"`
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// item is an example laid out for the head, with its cached features.
type item struct {
	state    string
	question int
	label    int
	seq      decide.Sequence
	feat     *features
	gen      uint64 // the adapter generation feat was computed under
}

// Learner wraps a decision model with RoR. Its methods are safe to call from
// several goroutines: feedback is handled one call at a time, and Decide runs
// beside it, seeing each version whole.
type Learner struct {
	m         *decide.Model // the model as it was given: task, calibration, metadata
	enc       *decide.Encoder
	adapterCF *inference.AdapterConfig // the decision adapter's config, for Save; nil without one
	opts      Options
	hidden    int
	pad       int

	busy       sync.Mutex       // one feedback call at a time; guards everything below but feedback
	live       *inference.Model // a fork of the base with the current version's adapter: what Decide reads
	work       *inference.Model // a fork of live: features, and the adapter steps
	workGen    uint64           // the adapter generation work holds
	anchor     []*item
	replay     []*item
	rng        *rand.Rand
	hist       history[version]
	current    *version
	nextGen    uint64
	trainables []string // head weights that learn

	mu       sync.RWMutex // current, live's adapter and the feedback, against Decide
	feedback map[string]*[Buckets]Bucket
}

// New wraps m, a decision model made over base with tokenizer tok (the same
// base and tokenizer Train or Load were given; New checks it reproduces m's
// scores and refuses otherwise). anchor is the held-out confirmed rows the
// rollback check scores (every answered question counts); they are never
// trained on, and should be none of the rows m was trained or calibrated on.
func New(ctx context.Context, m *decide.Model, base *inference.Model, tok *tokenizer.Tokenizer, anchor []decide.Row, opts Options) (*Learner, error) {
	l, err := newLearner(m, base, tok, opts)
	if err != nil {
		return nil, err
	}
	for _, r := range anchor {
		items, err := l.rowItems(r)
		if err != nil {
			return nil, err
		}
		l.anchor = append(l.anchor, items...)
	}
	if len(l.anchor) == 0 {
		return nil, errors.New("ror: the anchor set answers no question")
	}
	if err := l.checkHead(ctx); err != nil {
		return nil, err
	}
	if l.current.anchor, err = l.anchorAccuracy(ctx, l.current.head, l.anchor); err != nil {
		return nil, err
	}
	return l, nil
}

// newLearner makes the Learner's copy of m, version 0, with no anchor set yet.
func newLearner(m *decide.Model, base *inference.Model, tok *tokenizer.Tokenizer, opts Options) (*Learner, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.TrainAdapter && !m.Meta.Adapter {
		return nil, errors.New("ror: TrainAdapter on a decision model without an adapter")
	}
	enc, err := decide.NewEncoder(tok, m.Task, m.Meta.Marker, m.Meta.MaxSeqLength)
	if err != nil {
		return nil, err
	}
	l := &Learner{m: m, enc: enc, opts: opts, hidden: base.Config().HiddenSize, pad: m.Meta.Marker,
		rng: rand.New(rand.NewPCG(opts.Seed, 0x707)), feedback: map[string]*[Buckets]Bucket{}}
	head, err := l.readBack(base)
	if err != nil {
		return nil, err
	}
	l.work = l.live.Fork()
	for n := range head {
		if !isFixed(n) {
			l.trainables = append(l.trainables, n)
		}
	}
	slices.Sort(l.trainables)
	v := &version{head: head, adapter: l.live.AdapterSnapshot(), anchor: math.NaN()}
	l.hist, l.current = newHistory(v, opts.History, func(v *version) uint64 { return v.id }), v
	return l, nil
}

// readBack makes the Learner's copy of m: m saved to a temporary folder, its
// adapter pushed onto a fork of base (live), its head returned.
func (l *Learner) readBack(base *inference.Model) (map[string]*mx.Array, error) {
	tmp, err := os.MkdirTemp("", "inloop-ror-")
	if err != nil {
		return nil, fmt.Errorf("ror: %w", err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	if err := l.m.Save(dir); err != nil {
		return nil, fmt.Errorf("ror: %w", err)
	}
	l.live = base.Fork()
	if l.m.Meta.Adapter {
		a, ac, err := inference.ReadAdapter(l.live, dir)
		if err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
		if _, err := l.live.PushAdapter(a); err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
		l.adapterCF = ac
	}
	head, _, err := mx.LoadSafetensors(base.Backend(), filepath.Join(dir, decide.HeadFile))
	if err != nil {
		return nil, fmt.Errorf("ror: %w", err)
	}
	for n, a := range head {
		if !decide.IsHeadParam(n) {
			return nil, fmt.Errorf("ror: %s: unexpected weight %s", decide.HeadFile, n)
		}
		head[n] = mx.AsType(a, mx.Float32)
	}
	if err := mx.Eval(valuesOf(head)...); err != nil {
		return nil, fmt.Errorf("ror: %w", err)
	}
	return head, nil
}

// rowItems lays out every answered question of a row.
func (l *Learner) rowItems(r decide.Row) ([]*item, error) {
	toks, err := l.enc.StateTokens(r.State)
	if err != nil {
		return nil, err
	}
	var out []*item
	for q := range l.m.Task.Questions {
		if r.Answered(q) {
			out = append(out, &item{state: r.State, question: q, label: r.Labels[q], seq: l.enc.Sequence(q, toks)})
		}
	}
	return out, nil
}

// newItem lays out one example.
func (l *Learner) newItem(state, question, answer string) (*item, error) {
	q, qi := l.m.Task.Question(question)
	if q == nil {
		return nil, fmt.Errorf("ror: the task has no question %q", question)
	}
	label := -1
	if answer != "" {
		if label = q.OptionIndex(answer); label < 0 {
			return nil, fmt.Errorf("ror: question %q has no option %q", question, answer)
		}
	}
	toks, err := l.enc.StateTokens(state)
	if err != nil {
		return nil, err
	}
	return &item{state: state, question: qi, label: label, seq: l.enc.Sequence(qi, toks)}, nil
}

// checkHead compares RoR's scores for a few anchor states, every question,
// with the model's own.
func (l *Learner) checkHead(ctx context.Context) error {
	var states []string
	for _, it := range l.anchor {
		if !slices.Contains(states, it.state) {
			states = append(states, it.state)
		}
		if len(states) == 2 {
			break
		}
	}
	var items []*item
	for _, st := range states {
		toks, err := l.enc.StateTokens(st)
		if err != nil {
			return err
		}
		for q := range l.m.Task.Questions {
			items = append(items, &item{state: st, question: q, seq: l.enc.Sequence(q, toks)})
		}
	}
	if err := l.features(ctx, items); err != nil {
		return err
	}
	got, err := scoreCached(l.work.Backend(), l.m.Task, l.current.head, items, l.hidden)
	if err != nil {
		return err
	}
	want, _, err := l.m.Decide(ctx, states)
	if err != nil {
		return err
	}
	for i, it := range items {
		w := want[i/len(l.m.Task.Questions)][it.question].Scores
		for k := range w {
			if d := math.Abs(got[i][k] - w[k]); !(d <= 1e-3*max(1, math.Abs(w[k]))) {
				return fmt.Errorf("%w: question %s, option %d: %v here, %v from Decide", ErrHeadMismatch, l.m.Task.Questions[it.question].Name, k, got[i][k], w[k])
			}
		}
	}
	return nil
}

// features fills the items' features under the adapter work holds.
func (l *Learner) features(ctx context.Context, items []*item) error {
	return extract(ctx, l.work, l.m.Task, items, l.workGen, l.pad, decide.DefaultBatchTokens)
}

// anchorAccuracy scores items under head (and the adapter work holds).
func (l *Learner) anchorAccuracy(ctx context.Context, head map[string]*mx.Array, items []*item) (float64, error) {
	if err := l.features(ctx, items); err != nil {
		return math.NaN(), err
	}
	s, err := scoreCached(l.work.Backend(), l.m.Task, head, items, l.hidden)
	if err != nil {
		return math.NaN(), err
	}
	right := 0
	for i, it := range items {
		if calibrate.Argmax(s[i]) == it.label {
			right++
		}
	}
	return float64(right) / float64(len(items)), nil
}
