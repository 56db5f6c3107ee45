package ror

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/trainer"
)

// Remember adds confirmed rows (every answered question) to the replay
// buffer: what the model was trained on, say, so the first corrections
// already have something to hold on to. Their features are computed when they
// are first drawn.
func (l *Learner) Remember(rows []decide.Row) error {
	l.busy.Lock()
	defer l.busy.Unlock()
	for _, r := range rows {
		items, err := l.rowItems(r)
		if err != nil {
			return err
		}
		for _, it := range items {
			l.remember(it)
		}
	}
	return nil
}

// ReplayLen is how many examples the replay buffer holds.
func (l *Learner) ReplayLen() int {
	l.busy.Lock()
	defer l.busy.Unlock()
	return len(l.replay)
}

// remember puts it in the replay buffer in place of an example of the same
// state and question (a person's latest word on it counts), the oldest going
// out when the buffer is full.
func (l *Learner) remember(it *item) {
	for i, r := range l.replay {
		if r.question == it.question && r.state == it.state {
			l.replay = append(l.replay[:i], l.replay[i+1:]...)
			break
		}
	}
	if len(l.replay) >= l.opts.ReplayCap {
		l.replay = l.replay[1:]
	}
	l.replay = append(l.replay, it)
}

// draw picks up to Replay examples from the buffer, none about the state and
// question of a correction.
func (l *Learner) draw(corrections []*item) []*item {
	if l.opts.Replay < 0 {
		return nil
	}
	var pool []*item
	for _, r := range l.replay {
		clash := false
		for _, c := range corrections {
			clash = clash || (r.question == c.question && r.state == c.state)
		}
		if !clash {
			pool = append(pool, r)
		}
	}
	n := min(l.opts.Replay, len(pool))
	for i := range n { // a partial Fisher–Yates shuffle
		j := i + l.rng.IntN(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
	}
	return pool[:n]
}

// retrain steps on corrections mixed with replay until the model prefers
// every corrected answer (at most MaxSteps), checks the anchor set, and
// commits the step as a new version or rolls it back. The steps run on a copy
// of the head and the work fork; nothing Decide sees changes until commit.
func (l *Learner) retrain(ctx context.Context, corrections []*item) (Event, error) {
	cur := l.current
	ev := Event{Kind: KindRetrain, VersionBefore: cur.id, VersionAfter: cur.id, AnchorBefore: cur.anchor, AnchorAfter: cur.anchor}
	stepsBegan := time.Now()
	if err := l.syncWork(cur); err != nil {
		return ev, err
	}
	replay := l.draw(corrections)
	items := append(append([]*item(nil), corrections...), replay...)
	// The corrections weigh as much as the replay together: replay steadies
	// the step without drowning what it is for.
	weights := map[*item]float32{}
	for _, it := range corrections {
		weights[it] = 1 / float32(len(corrections))
	}
	for _, it := range replay {
		weights[it] = 1 / float32(len(replay))
	}
	params := map[string]*mx.Array{}
	for _, n := range l.trainables {
		params[n] = cur.head[n]
	}
	bind := func(map[string]*mx.Array) (*inference.Model, error) { return l.work, nil }
	if l.opts.TrainAdapter {
		maps.Copy(params, lora.Params(l.work))
		bind = func(p map[string]*mx.Array) (*inference.Model, error) {
			ad := map[string]*mx.Array{}
			for n, a := range p {
				if !decide.IsHeadParam(n) {
					ad[n] = a
				}
			}
			return l.work, lora.SetParams(l.work, ad)
		}
		l.workGen = l.newGen() // work's adapter is about to move
	} else if err := l.features(ctx, items); err != nil {
		return ev, err
	}
	headOf := func(p map[string]*mx.Array) map[string]*mx.Array {
		h := maps.Clone(cur.head)
		for n, a := range p {
			if decide.IsHeadParam(n) {
				h[n] = a
			}
		}
		return h
	}
	stepper := trainer.Stepper{Bind: bind, Optimizer: &sgd{head: l.opts.LearningRate, adapter: l.opts.AdapterLearningRate}}
	if l.opts.ClipNorm > 0 {
		stepper.ClipNorm = l.opts.ClipNorm
	}
	batch := trainer.Batch{
		Weight: float32(len(items)),
		Loss: func(m *inference.Model, p map[string]*mx.Array) *mx.Array {
			var src *inference.Model // where the features come from: the cache (nil), or m's traced adapter
			if l.opts.TrainAdapter {
				src = m
			}
			return loss(src, m.Backend(), l.m.Task, headOf(p), items, weights, l.hidden, l.pad)
		},
	}
	for _, it := range items {
		batch.Tokens += int64(len(it.seq.Tokens))
	}
	fail := func(err error) (Event, error) {
		if rerr := l.rollbackWork(cur); rerr != nil {
			err = fmt.Errorf("%w (and restoring the work adapter: %v)", err, rerr)
		}
		ev.StepMS = ms(time.Since(stepsBegan))
		return ev, err
	}
	for ev.Steps < l.opts.MaxSteps {
		if ev.Steps == 0 {
			ce, _, err := l.correctionLoss(ctx, headOf(params), corrections)
			if err != nil {
				return fail(err)
			}
			ev.Loss = ce
		}
		sr, err := stepper.Step(ctx, params, []trainer.Batch{batch})
		if err != nil {
			return fail(err)
		}
		params = sr.Params
		ev.Steps++
		ce, flipped, err := l.correctionLoss(ctx, headOf(params), corrections)
		if err != nil {
			return fail(err)
		}
		ev.LossAfter, ev.Flipped = ce, flipped
		if flipped {
			break
		}
	}
	ev.StepMS = ms(time.Since(stepsBegan))

	checkBegan := time.Now()
	head := headOf(params)
	anchor := l.anchor
	if l.opts.TrainAdapter { // score the anchors under the new adapter without losing their features under the old
		anchor = make([]*item, len(l.anchor))
		for i, it := range l.anchor {
			cp := *it
			cp.feat = nil
			anchor[i] = &cp
		}
	}
	acc, err := l.anchorAccuracy(ctx, head, anchor)
	ev.CheckMS = ms(time.Since(checkBegan))
	if err != nil {
		return fail(err)
	}
	ev.AnchorAfter = acc
	if cur.anchor-acc > l.opts.AnchorMargin {
		ev.Kind = KindRollback
		ev.Detail = fmt.Sprintf("anchor accuracy %.4f → %.4f, a drop over the %.4f allowed", cur.anchor, acc, l.opts.AnchorMargin)
		if err := l.rollbackWork(cur); err != nil {
			return ev, err
		}
		return ev, nil
	}
	v := &version{head: head, adapter: cur.adapter, gen: cur.gen, anchor: acc}
	if l.opts.TrainAdapter {
		v.adapter, v.gen = l.work.AdapterSnapshot(), l.workGen
		l.anchor = anchor
	}
	if err := l.commit(v); err != nil {
		return fail(err)
	}
	for _, it := range corrections {
		l.remember(it)
	}
	ev.VersionAfter = v.id
	return ev, nil
}

// newGen numbers a new adapter state.
func (l *Learner) newGen() uint64 {
	l.nextGen++
	return l.nextGen
}

// rollbackWork puts cur's adapter back on the work fork after a step that did
// not stick.
func (l *Learner) rollbackWork(cur *version) error {
	if l.workGen == cur.gen {
		return nil
	}
	l.workGen = math.MaxUint64 // unknown until the restore succeeds
	return l.syncWork(cur)
}

// correctionLoss is the corrections' mean cross-entropy under head (and the
// adapter work holds) and whether the model now prefers every corrected
// answer.
func (l *Learner) correctionLoss(ctx context.Context, head map[string]*mx.Array, corrections []*item) (float64, bool, error) {
	items := corrections
	if l.opts.TrainAdapter { // features under the adapter as it is now, not as cached
		items = make([]*item, len(corrections))
		for i, it := range corrections {
			cp := *it
			cp.feat = nil
			items[i] = &cp
		}
	}
	if err := l.features(ctx, items); err != nil {
		return math.NaN(), false, err
	}
	s, err := scoreCached(l.work.Backend(), l.m.Task, head, items, l.hidden)
	if err != nil {
		return math.NaN(), false, err
	}
	var ce float64
	flipped := true
	for i, it := range items {
		p := calibrate.Softmax(s[i], 1)
		ce -= math.Log(max(p[it.label], 1e-30))
		flipped = flipped && calibrate.Argmax(s[i]) == it.label
	}
	return ce / float64(len(items)), flipped, nil
}
