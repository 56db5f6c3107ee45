package ror

import (
	"context"

	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
)

// temperature is question q's calibrated temperature, 1 when uncalibrated.
func (l *Learner) temperature(q string) float64 {
	if c := l.m.Calibration; c != nil && c.Questions[q] != nil && c.Questions[q].Temperature > 0 {
		return c.Questions[q].Temperature
	}
	return 1
}

// threshold is the gate for question q.
func (l *Learner) threshold(q string) float64 {
	if l.opts.Threshold > 0 {
		return l.opts.Threshold
	}
	if c := l.m.Calibration; c != nil && c.Questions[q] != nil {
		return c.Questions[q].Threshold
	}
	return 0
}

// answer is the current version's answer to it, as Decide would give it.
func (l *Learner) answer(ctx context.Context, it *item) (choice int, confidence float64, err error) {
	if err := l.syncWork(l.current); err != nil {
		return 0, 0, err
	}
	if err := l.features(ctx, []*item{it}); err != nil {
		return 0, 0, err
	}
	s, err := scoreCached(l.work.Backend(), l.m.Task, l.current.head, []*item{it}, l.hidden)
	if err != nil {
		return 0, 0, err
	}
	p := calibrate.Softmax(s[0], l.temperature(l.m.Task.Questions[it.question].Name))
	k := calibrate.Argmax(p)
	return k, p[k], nil
}

// Decide answers every question of the task for each state, as the model
// would with the current version's weights: the same scores and calibrated
// probabilities, except that Confidence is the feedback-adjusted confidence
// (Bucket) and Escalate the gate on it. cut[i] reports that state i was cut to
// fit.
func (l *Learner) Decide(ctx context.Context, states []string) ([][]decide.Decision, []bool, error) {
	var items []*item
	cut := make([]bool, len(states))
	for i, st := range states {
		toks, err := l.enc.StateTokens(st)
		if err != nil {
			return nil, nil, err
		}
		for q := range l.m.Task.Questions {
			it := &item{state: st, question: q, label: -1, seq: l.enc.Sequence(q, toks)}
			cut[i] = cut[i] || it.seq.Cut
			items = append(items, it)
		}
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	err := l.live.WithAdapterReadLock(func(uint64) error {
		return extract(ctx, l.live, l.m.Task, items, 0, l.pad, decide.DefaultBatchTokens)
	})
	if err != nil {
		return nil, nil, err
	}
	s, err := scoreCached(l.live.Backend(), l.m.Task, l.current.head, items, l.hidden)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]decide.Decision, len(states))
	nq := len(l.m.Task.Questions)
	for i := range out {
		out[i] = make([]decide.Decision, nq)
		for q := range nq {
			out[i][q] = l.decisionLocked(q, s[i*nq+q])
		}
	}
	return out, cut, nil
}

// decisionLocked turns question qi's raw scores into a Decision, as decide
// does, with the adjusted confidence and the gate.
func (l *Learner) decisionLocked(qi int, s []float64) decide.Decision {
	q := l.m.Task.Questions[qi]
	p := calibrate.Softmax(s, l.temperature(q.Name))
	k := calibrate.Argmax(p)
	d := decide.Decision{Question: q.Name, Choice: q.Options[k].Name, Probs: map[string]float64{}, Scores: s}
	for j, o := range q.Options {
		d.Probs[o.Name] = p[j]
	}
	d.Confidence = l.adjustedLocked(q.Name, p[k])
	d.Escalate = d.Confidence < l.threshold(q.Name)
	return d
}
