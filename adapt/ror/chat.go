package ror

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// Reinforce-or-retrain for chat replies. The answer is text, so:
//
//   - its confidence is the reply's mean token probability under the model
//     (inference.Stats.TokenProbability), pulled toward what people said about
//     replies of that confidence (the same Bucket history as decisions);
//   - 👍 keeps the reply as a confirmed example: every other one joins the
//     anchor set, the rest the replay buffer; no weights change;
//   - 👎 with a corrected text takes a LoRA step on the correction (next-token
//     loss on the reply's tokens, given the conversation before it) mixed with
//     replay examples, more steps (up to MaxSteps) only while the model still
//     prefers its own reply to the correction (a lower mean loss per token);
//     then the anchor set is scored — its next-token accuracy over the
//     confirmed replies' tokens, teacher-forced — and the step is rolled back
//     when that fell by more than AnchorMargin;
//   - 👎 alone is recorded: the bucket is lowered and the reply offered for
//     escalation.
//
// The ChatLearner trains an adapter of its own, pushed on top of the chat
// model's stack (zero-initialised, so it changes nothing until a correction).
// It steps and checks on a fork of that model, so the chat can go on
// answering while it learns; only a kept step is published to the chat's
// model, under the chat's turn lock, between two replies. Every kept step is a
// version: the adapter's weights and the optimizer's state, installed bit for
// bit by Undo and RestoreVersion.

// Defaults of ChatOptions.
const (
	DefaultChatThreshold    = 0.5
	DefaultChatLearningRate = 1e-3
	DefaultChatRank         = 8
	DefaultChatLayers       = 4
	DefaultChatReplay       = 2
	DefaultChatAnchorMargin = 0.05 // a drop in anchor accuracy, as a share
	DefaultChatMaxTokens    = 512
)

// ChatOptions steer a ChatLearner; zero fields take the defaults.
type ChatOptions struct {
	Threshold    float64 // below this adjusted confidence a reply is offered for escalation
	MaxSteps     int
	LearningRate float64 // Adam's
	Rank, Layers int     // of the correction adapter
	Replay       int     // replay examples mixed into a step
	AnchorMargin float64 // the drop in anchor accuracy a step may cause
	Prior        float64
	History      int
	MaxTokens    int // a longer conversation keeps its last MaxTokens tokens
	ClipNorm     float64
	Seed         uint64
}

func (o ChatOptions) withDefaults() ChatOptions {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Threshold, DefaultChatThreshold)
	def(&o.LearningRate, DefaultChatLearningRate)
	def(&o.AnchorMargin, DefaultChatAnchorMargin)
	def(&o.Prior, DefaultPrior)
	def(&o.ClipNorm, DefaultClipNorm)
	defi(&o.MaxSteps, DefaultMaxSteps)
	defi(&o.Rank, DefaultChatRank)
	defi(&o.Layers, DefaultChatLayers)
	defi(&o.Replay, DefaultChatReplay)
	defi(&o.History, DefaultHistory)
	defi(&o.MaxTokens, DefaultChatMaxTokens)
	return o
}

// ChatExample is a reply in its conversation: Prompt is the conversation
// before it as the model read it (the template's generation prompt included),
// Reply the reply's tokens with the end-of-turn token.
type ChatExample struct {
	Prompt []int
	Reply  []int
}

// chatVersion is the correction adapter's weights and the optimizer's state
// at one point.
type chatVersion struct {
	id     uint64
	params map[string]*mx.Array
	opt    optim.State
	anchor float64 // accuracy on the anchor set; NaN before one exists
}

// ChatLearner is RoR over one chat's model. Its learning methods run one at a
// time (mu); Adjusted, Feedback and Version answer at once, even while one
// runs. A caller that passes its turn lock to NewChat must not hold it while
// calling a learning method (a kept step takes it to publish).
type ChatLearner struct {
	live *inference.Model // the chat's model: what replies are computed with
	turn sync.Locker      // held while live's adapter changes; nil for none
	m    *inference.Model // a fork of live: where steps and checks run
	opts ChatOptions
	cfg  lora.Config // of the correction adapter
	opt  optim.Optimizer

	mu       sync.Mutex // one learning call at a time; guards what follows but feedback
	fb       sync.Mutex // guards feedback
	version  atomic.Uint64
	cut      int // the first block with the correction adapter: examples' prefixes below it are cached
	anchor   []*chatItem
	replay   []*chatItem
	ups      int
	rng      *rand.Rand
	hist     history[chatVersion]
	current  *chatVersion
	feedback [Buckets]Bucket
}

// NewChat pushes a fresh correction adapter on m's stack and returns its
// learner, at version 0. turn, when not nil, is taken while m's adapter
// changes (a kept step, an undo), so the change falls between two replies.
func NewChat(m *inference.Model, turn sync.Locker, opts ChatOptions) (*ChatLearner, error) {
	return newChat(m, turn, opts, "")
}

// NewChatFrom is NewChat with the corrections a learner saved in dir (Save)
// as its starting point, version 0, instead of a fresh adapter: a chat
// continued later answers as it had learnt to.
func NewChatFrom(m *inference.Model, turn sync.Locker, opts ChatOptions, dir string) (*ChatLearner, error) {
	return newChat(m, turn, opts, dir)
}

func newChat(m *inference.Model, turn sync.Locker, opts ChatOptions, dir string) (*ChatLearner, error) {
	opts = opts.withDefaults()
	if opts.Threshold < 0 || opts.Threshold > 1 || opts.LearningRate <= 0 || opts.AnchorMargin < 0 || opts.MaxSteps < 1 {
		return nil, fmt.Errorf("ror: chat options %+v", opts)
	}
	cfg := lora.Config{NumLayers: opts.Layers, Rank: opts.Rank, Seed: opts.Seed, Name: "ror"}
	if dir == "" {
		if _, err := lora.Apply(m, cfg); err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
	} else {
		a, ac, err := inference.ReadAdapter(m, dir)
		if err != nil {
			return nil, fmt.Errorf("ror: the chat's corrections: %w", err)
		}
		if ac.NumLayers != opts.Layers || ac.LoRAParameters.Rank != opts.Rank {
			return nil, fmt.Errorf("ror: the chat's corrections in %s are rank %d on %d blocks, the learner's %d on %d", dir, ac.LoRAParameters.Rank, ac.NumLayers, opts.Rank, opts.Layers)
		}
		if _, err := m.PushAdapter(a); err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
	}
	o := optim.NewAdam(optim.Constant(float32(opts.LearningRate)))
	o.BiasCorrection = true
	l := &ChatLearner{live: m, turn: turn, m: m.Fork(), opts: opts, cfg: cfg, opt: o, rng: rand.New(rand.NewPCG(opts.Seed, 0x0c4a7))}
	if n := m.Blocks(); opts.Layers >= 0 && opts.Layers < n {
		l.cut = n - opts.Layers
	}
	for i := range l.feedback {
		l.feedback[i] = Bucket{Low: float64(i) / Buckets, High: float64(i+1) / Buckets}
	}
	v := &chatVersion{params: lora.Params(m), opt: o.State(), anchor: math.NaN()}
	l.hist, l.current = newHistory(v, opts.History, func(v *chatVersion) uint64 { return v.id }), v
	return l, nil
}

// Adjusted is the confidence reported for a reply of mean token probability p,
// and whether it is below the gate.
func (l *ChatLearner) Adjusted(p float64) (float64, bool) {
	l.fb.Lock()
	defer l.fb.Unlock()
	a := l.adjustedLocked(p)
	return a, a < l.opts.Threshold
}

func (l *ChatLearner) adjustedLocked(p float64) float64 {
	k := l.feedback[bucketOf(p)]
	return (l.opts.Prior*p + float64(k.Up)) / (l.opts.Prior + float64(k.Up+k.Down))
}

// record counts a thumb on a reply of mean token probability p and returns the
// adjusted confidence after it.
func (l *ChatLearner) record(p float64, up bool) float64 {
	l.fb.Lock()
	defer l.fb.Unlock()
	if up {
		l.feedback[bucketOf(p)].Up++
	} else {
		l.feedback[bucketOf(p)].Down++
	}
	return l.adjustedLocked(p)
}

// Feedback returns the confidence buckets, lowest first.
func (l *ChatLearner) Feedback() []Bucket {
	l.fb.Lock()
	defer l.fb.Unlock()
	return slices.Clone(l.feedback[:])
}

// AddAnchor adds confirmed examples (from earlier chats, say) to the anchor set
// without a thumb, and scores the current version on it.
func (l *ChatLearner) AddAnchor(ctx context.Context, exs ...ChatExample) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ex := range exs {
		if err := l.check(ex); err != nil {
			return err
		}
	}
	for _, ex := range exs {
		l.addAnchor(l.item(ex))
	}
	_, _, err := l.currentAnchor(ctx)
	return err
}

// Anchors and ReplayLen say how many confirmed examples each set holds.
func (l *ChatLearner) Anchors() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.anchor)
}

func (l *ChatLearner) ReplayLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.replay)
}

func (l *ChatLearner) check(ex ChatExample) error {
	if len(ex.Reply) == 0 {
		return errors.New("ror: a reply of no tokens")
	}
	if len(ex.Prompt) == 0 {
		return errors.New("ror: a reply with no conversation before it")
	}
	vocab := l.m.Config().VocabSize
	for _, t := range slices.Concat(ex.Prompt, ex.Reply) {
		if t < 0 || t >= vocab {
			return fmt.Errorf("ror: token %d outside the vocabulary (%d)", t, vocab)
		}
	}
	return nil
}

// ThumbUp confirms reply (of mean token probability p): it becomes an anchor
// or a replay example. No weights change.
func (l *ChatLearner) ThumbUp(ctx context.Context, ex ChatExample, p float64) (Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	began := time.Now()
	ev := l.event(KindReinforce)
	if err := l.check(ex); err != nil {
		return ev, err
	}
	ev.Confidence, ev.Adjusted = p, l.record(p, true)
	if l.ups%2 == 0 {
		l.addAnchor(l.item(ex))
		acc, _, err := l.currentAnchor(ctx)
		if err != nil {
			return ev, err
		}
		ev.AnchorAfter, ev.Detail = acc, "kept for the anchor set"
	} else {
		l.remember(l.item(ex))
		ev.Detail = "kept for replay"
	}
	l.ups++
	ev.MS = ms(time.Since(began))
	return ev, nil
}

// ThumbDown says reply ex (of mean token probability p) is wrong. With a
// correction (its tokens, end-of-turn included) it retrains; without, it is
// recorded and offered for escalation.
func (l *ChatLearner) ThumbDown(ctx context.Context, ex ChatExample, p float64, correction []int) (Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	began := time.Now()
	ev := l.event(KindRecord)
	if err := l.check(ex); err != nil {
		return ev, err
	}
	ev.Confidence, ev.Adjusted = p, l.record(p, false)
	if len(correction) == 0 {
		ev.Escalate, ev.Detail = true, "no correction: recorded, offered for escalation"
		ev.MS = ms(time.Since(began))
		return ev, nil
	}
	fix := ChatExample{Prompt: ex.Prompt, Reply: correction}
	if err := l.check(fix); err != nil {
		return ev, err
	}
	step, err := l.retrain(ctx, l.item(fix), l.item(ex))
	step.Confidence, step.Adjusted = ev.Confidence, ev.Adjusted
	step.Escalate = step.Adjusted < l.opts.Threshold
	step.MS = ms(time.Since(began))
	return step, err
}

func (l *ChatLearner) event(k Kind) Event {
	a := l.current.anchor
	return Event{Kind: k, VersionBefore: l.current.id, VersionAfter: l.current.id, AnchorBefore: a, AnchorAfter: a}
}

// retrain steps on fix (mixed with replay) until the model prefers it to
// wrong, then checks the anchor set and keeps or rolls back.
func (l *ChatLearner) retrain(ctx context.Context, fix, wrong *chatItem) (Event, error) {
	cur := l.current
	defer l.trimCache()
	if _, _, err := l.currentAnchor(ctx); err != nil { // the baseline, on the anchors there are now
		return l.event(KindRetrain), err
	}
	ev := l.event(KindRetrain)
	var stepTime, flipTime time.Duration
	timed := func(d *time.Duration, began time.Time) { *d += time.Since(began) }
	var replay []*chatItem
	for _, i := range l.rng.Perm(len(l.replay))[:min(l.opts.Replay, len(l.replay))] {
		replay = append(replay, l.replay[i])
	}
	began := time.Now()
	if err := l.prefix(ctx, append([]*chatItem{fix, wrong}, replay...)...); err != nil {
		return ev, err
	}
	ev.ReadMS = ms(time.Since(began))
	batches := []trainer.Batch{l.stepBatch(fix, replay)}
	stepper := trainer.Stepper{Bind: trainer.Adapters(l.m), Optimizer: l.opt, ClipNorm: l.opts.ClipNorm}
	fail := func(err error) (Event, error) {
		if rerr := l.restoreWork(cur); rerr != nil {
			err = fmt.Errorf("%w (and restoring the adapter: %v)", err, rerr)
		}
		ev.StepMS, ev.FlipMS = ms(stepTime), ms(flipTime)
		return ev, err
	}
	params := cur.params
	prefers := func() (fixLoss float64, ok bool, err error) {
		defer timed(&flipTime, time.Now())
		s, err := l.scoreItems(ctx, []*chatItem{fix, wrong})
		if err != nil {
			return 0, false, err
		}
		fl, wl := s[0].loss/s[0].n, s[1].loss/s[1].n
		return fl, fl < wl, nil
	}
	// The loss before: the correction's alone (a step is always taken).
	began = time.Now()
	s, err := l.scoreItems(ctx, []*chatItem{fix})
	timed(&flipTime, began)
	if err != nil {
		return fail(err)
	}
	ev.Loss = s[0].loss / s[0].n
	for ev.Steps < l.opts.MaxSteps {
		began := time.Now()
		sr, err := stepper.Step(ctx, params, batches)
		timed(&stepTime, began)
		if err != nil {
			return fail(err)
		}
		params = sr.Params
		ev.Steps++
		fl, ok, err := prefers()
		if err != nil {
			return fail(err)
		}
		ev.LossAfter, ev.Flipped = fl, ok
		if ok {
			break
		}
	}
	ev.StepMS, ev.FlipMS = ms(stepTime), ms(flipTime)

	checkBegan := time.Now()
	scores, err := l.scoreItems(ctx, l.anchor)
	acc, loss := aggregate(scores)
	ev.CheckMS = ms(time.Since(checkBegan))
	if err != nil {
		return fail(err)
	}
	ev.AnchorAfter = acc
	if !math.IsNaN(acc) && cur.anchor-acc > l.opts.AnchorMargin {
		ev.Kind = KindRollback
		ev.Detail = fmt.Sprintf("anchor accuracy %.4f → %.4f, a drop over the %.4f allowed (loss per token %.4f after)", cur.anchor, acc, l.opts.AnchorMargin, loss)
		if err := l.restoreWork(cur); err != nil {
			return ev, err
		}
		return ev, nil
	}
	if math.IsNaN(acc) {
		ev.Detail = "no confirmed replies to check against yet"
	} else {
		ev.Detail = fmt.Sprintf("anchor loss per token %.4f after", loss)
	}
	v := &chatVersion{id: l.hist.peekID(), params: params, opt: l.opt.State(), anchor: acc}
	if err := l.publish(v); err != nil {
		return fail(err)
	}
	l.hist.add(v, cur)
	for i, it := range l.anchor {
		scores[i].version = v.id
		it.score = &scores[i]
	}
	l.remember(fix)
	ev.VersionAfter = v.id
	return ev, nil
}

// restoreWork puts v's weights and optimizer state back on the work fork.
func (l *ChatLearner) restoreWork(v *chatVersion) error {
	if err := lora.SetParams(l.m, v.params); err != nil {
		return fmt.Errorf("ror: %w", err)
	}
	if err := l.opt.SetState(v.opt); err != nil {
		return fmt.Errorf("ror: %w", err)
	}
	return nil
}

// publish makes v the weights the chat answers with.
func (l *ChatLearner) publish(v *chatVersion) error {
	if l.turn != nil {
		l.turn.Lock()
		defer l.turn.Unlock()
	}
	if err := lora.SetParams(l.live, v.params); err != nil {
		return fmt.Errorf("ror: %w", err)
	}
	l.current = v
	l.version.Store(v.id)
	return nil
}

// install makes v current on both models.
func (l *ChatLearner) install(v *chatVersion) error {
	if err := l.restoreWork(v); err != nil {
		return err
	}
	return l.publish(v)
}

// Undo goes back to the version before the last change, bit for bit.
func (l *ChatLearner) Undo() (Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	began := time.Now()
	ev := l.event(KindUndo)
	prev, err := l.hist.back(l.install)
	if err != nil {
		return ev, err
	}
	ev.VersionAfter, ev.AnchorAfter = prev.id, prev.anchor
	ev.MS = ms(time.Since(began))
	return ev, nil
}

// RestoreVersion installs version id; Undo returns to the one before.
func (l *ChatLearner) RestoreVersion(id uint64) (Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	began := time.Now()
	ev := l.event(KindRestore)
	prev := l.current
	v, err := l.hist.restore(id, prev, l.install)
	if err != nil || v == prev {
		return ev, err
	}
	ev.VersionAfter, ev.AnchorAfter = v.id, v.anchor
	ev.MS = ms(time.Since(began))
	return ev, nil
}

// Version is the version in use; Versions all RestoreVersion can reach.
func (l *ChatLearner) Version() uint64 { return l.version.Load() }

func (l *ChatLearner) Versions() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hist.ids()
}

// Save writes the version in use as an adapter folder in mlx-lm's layout,
// which NewChatFrom (and inference.LoadAdapter) read.
func (l *ChatLearner) Save(dir string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ac, err := lora.AdapterConfig(l.m, l.cfg)
	if err != nil {
		return fmt.Errorf("ror: %w", err)
	}
	return lora.SaveArrays(dir, l.current.params, ac)
}

// Params are the correction adapter's current weights (lora's names), to save.
func (l *ChatLearner) Params() map[string]*mx.Array {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.current.params)
}

// chatItem is an example laid out for the learner: its next-token batch,
// the first position whose target is a reply token, and the hidden states
// below the adapted blocks, computed once (nil until needed).
type chatItem struct {
	ex    ChatExample
	bt    data.Batch
	first int
	h     *mx.Array
	score *itemScore // an anchor's, under the version it names
}

// replyLen is how many reply positions it learns (and is scored on).
func (it *chatItem) replyLen() int { return it.bt.L - it.first }

// item lays ex out: the conversation cut to its last MaxTokens tokens, the
// reply's tokens learned.
func (l *ChatLearner) item(ex ChatExample) *chatItem {
	prompt := ex.Prompt
	if keep := l.opts.MaxTokens - len(ex.Reply); len(prompt) > keep {
		prompt = prompt[len(prompt)-max(keep, 1):]
	}
	seq := slices.Concat(prompt, ex.Reply)
	n := len(seq) - 1
	bt := data.Batch{B: 1, L: n, IDs: make([]int32, n), Targets: make([]int32, n), Mask: make([]float32, n),
		Lengths: []int32{int32(n)}, Rows: []int{0}}
	for i := range n {
		bt.IDs[i], bt.Targets[i] = int32(seq[i]), int32(seq[i+1])
		if i >= len(prompt)-1 {
			bt.Mask[i] = 1
		}
	}
	return &chatItem{ex: ex, bt: bt, first: len(prompt) - 1}
}

// maxAnchors caps the anchor set: every check scores all of it, so it must
// not grow with a long chat. The newest confirmed replies are kept.
const maxAnchors = 16

// addAnchor adds it to the anchor set, the oldest out past the cap.
func (l *ChatLearner) addAnchor(it *chatItem) {
	l.anchor = append(l.anchor, it)
	if extra := len(l.anchor) - maxAnchors; extra > 0 {
		clear(l.anchor[:extra])
		l.anchor = l.anchor[extra:]
	}
}

// cachedReplay is how many of the newest replay items keep their prefix (on
// Qwen3-0.6B's shape, 2 MB for a 512-token conversation); older ones compute
// it again when drawn.
const cachedReplay = 8

// remember adds it to the replay buffer, oldest out first past the cap.
func (l *ChatLearner) remember(it *chatItem) {
	l.replay = append(l.replay, it)
	if len(l.replay) > DefaultReplayCap {
		l.replay[0] = nil
		l.replay = l.replay[1:]
	}
	l.trimCache()
}

// trimCache lets go of the prefixes of replay items older than the newest
// cachedReplay (a step may have computed them for a draw).
func (l *ChatLearner) trimCache() {
	for _, it := range l.replay[:max(len(l.replay)-cachedReplay, 0)] {
		it.h = nil
	}
}

// prefix computes the items' hidden states below the adapted blocks, where
// missing. The blocks below carry no weights the learner trains, so they hold
// for every version.
func (l *ChatLearner) prefix(ctx context.Context, items ...*chatItem) error {
	for _, it := range items {
		if it.h != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		h := l.m.Prefix(mx.FromData(l.m.Backend(), mx.Int32, it.bt.IDs, 1, it.bt.L), l.cut)
		if err := mx.Eval(h); err != nil {
			return fmt.Errorf("ror: %w", err)
		}
		it.h = h
	}
	return nil
}

// stepBatch is a retrain step's one batch (the items' prefixes must be
// computed): the correction weighs as much as the replay items together, and
// each item's weight is shared by its reply tokens, what one micro-batch per
// item (the mean loss over its reply, weighted by its weight) would give, loss
// and gradient. The items run through the adapted blocks together, padded at
// their ends to one length: one pass of 3 × 96 positions costs less than three
// of 96, most where a product's weights must be unpacked or widened for each.
func (l *ChatLearner) stepBatch(fix *chatItem, replay []*chatItem) trainer.Batch {
	items := append([]*chatItem{fix}, replay...)
	L, tokens := 0, int64(0)
	for _, it := range items {
		L, tokens = max(L, it.bt.L), tokens+int64(it.bt.L)
	}
	rows, targets := replyRows(items, L)
	nFix := float32(fix.replyLen())
	total := nFix
	if len(replay) > 0 {
		total = 2 * nFix
	}
	var weights []float32
	for b, it := range items {
		share := nFix // of the total weight: the correction's, or its part of the replay's
		if b > 0 {
			share = nFix / float32(len(replay))
		}
		n := it.replyLen()
		for range n {
			weights = append(weights, share/(float32(n)*total))
		}
	}
	return trainer.Batch{Weight: total, Tokens: tokens, Loss: func(m *inference.Model, _ map[string]*mx.Array) *mx.Array {
		return m.SuffixLoss(padded(items, L), l.cut, rows, targets, weights)
	}}
}

// padded is the items' prefixes as one batch (len(items), L, hidden), each
// padded with zeros at its end.
func padded(items []*chatItem, L int) *mx.Array {
	hs := make([]*mx.Array, len(items))
	for i, it := range items {
		hs[i] = it.h
		if pad := L - it.bt.L; pad > 0 {
			hs[i] = mx.Concatenate([]*mx.Array{it.h, mx.Full(it.h.Backend(), []int{1, pad, it.h.Dim(2)}, 0, it.h.DType())}, 1)
		}
	}
	if len(hs) == 1 {
		return hs[0]
	}
	return mx.Concatenate(hs, 0)
}

// replyRows are the items' reply positions in a padded batch of rows of L
// positions (b·L + t, item by item), and the tokens each predicts.
func replyRows(items []*chatItem, L int) (rows, targets []int32) {
	for b, it := range items {
		for t := it.first; t < it.bt.L; t++ {
			rows, targets = append(rows, int32(b*L+t)), append(targets, it.bt.Targets[t])
		}
	}
	return rows, targets
}

// itemScore is an anchor's figures under one version: reply tokens ranked
// first, reply tokens, and their summed loss.
type itemScore struct {
	version        uint64
	right, n, loss float64
}

// aggregate is the anchor set's next-token accuracy over the reply tokens
// (teacher-forced: the share of them the model ranks first) and its mean loss
// per reply token; NaN for both when there are none.
func aggregate(scores []itemScore) (acc, loss float64) {
	var right, n, sum float64
	for _, s := range scores {
		right, n, sum = right+s.right, n+s.n, sum+s.loss
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	return right / n, sum / n
}

// currentAnchor is aggregate for the version in use. An anchor keeps its
// figures under the version they were computed for, so only anchors new since
// (or all, after an undo) are scored: a thumb up in a long chat costs one
// anchor's pass, not the set's. The work fork must hold the current weights.
func (l *ChatLearner) currentAnchor(ctx context.Context) (acc, loss float64, err error) {
	var todo []*chatItem
	for _, it := range l.anchor {
		if it.score == nil || it.score.version != l.current.id {
			todo = append(todo, it)
		}
	}
	scores, err := l.scoreItems(ctx, todo)
	if err != nil {
		return 0, 0, err
	}
	for i, it := range todo {
		scores[i].version = l.current.id
		it.score = &scores[i]
	}
	all := make([]itemScore, len(l.anchor))
	for i, it := range l.anchor {
		all[i] = *it.score
	}
	acc, loss = aggregate(all)
	l.current.anchor = acc
	return acc, loss, nil
}

// scoreItems scores items under the work fork's weights. Each item's prefix
// is computed once; a score runs the adapted blocks over groups of items
// padded into one batch (as many as fit scoreRows reply positions, at least
// one), and the head over their reply positions only; only each position's
// loss and argmax leave the backend.
func (l *ChatLearner) scoreItems(ctx context.Context, items []*chatItem) ([]itemScore, error) {
	if err := l.prefix(ctx, items...); err != nil {
		return nil, err
	}
	out := make([]itemScore, len(items))
	b := l.m.Backend()
	for g, e := 0, 0; g < len(items); g = e {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		L, n := 0, 0
		for e = g; e < len(items) && (e == g || n+items[e].replyLen() <= scoreRows); e++ {
			L, n = max(L, items[e].bt.L), n+items[e].replyLen()
		}
		group := items[g:e]
		rows, targets := replyRows(group, L)
		logits := l.m.SuffixRows(padded(group, L), l.cut, rows)
		ce, err := mx.CrossEntropy(logits, mx.FromData(b, mx.Int32, targets, len(targets))).Float32s()
		if err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
		got, err := mx.ArgMax(logits, -1, false).Int32s()
		if err != nil {
			return nil, fmt.Errorf("ror: %w", err)
		}
		i := 0
		for j, it := range group {
			s := &out[g+j]
			for range it.replyLen() {
				s.n++
				s.loss += float64(ce[i])
				if got[i] == targets[i] {
					s.right++
				}
				i++
			}
		}
	}
	return out, nil
}

// scoreRows is how many reply positions a score puts through the head at
// once: 78 MB of logits on Qwen3's 151,936-word vocabulary (four replies of
// 32 tokens); a longer reply goes alone, as before groups.
const scoreRows = 128
