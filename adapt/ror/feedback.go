package ror

import (
	"context"
	"fmt"
	"time"
)

// Bucket is the feedback on one question's answers whose calibrated
// confidence fell in [Low, High): how many were confirmed (👍) and how many
// were wrong (👎).
//
// The confidence the Learner reports for an answer (Decide, the gate, Event's
// Adjusted) is the model's calibrated confidence c pulled toward what people
// said about answers of that bucket:
//
//	adjusted = (Prior·c + Up) / (Prior + Up + Down)
//
// With no feedback it is c; each 👎 lowers it, each 👍 raises it, and after
// many answers it approaches the bucket's observed accuracy — a per-bucket
// recalibration learnt from use, where temperature scaling was fitted once on
// the held-out split. "Lowering a bucket" is a 👎 here: every answer that falls
// in the bucket is then reported less sure, and may drop below the gate.
type Bucket struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	Up   int     `json:"up"`
	Down int     `json:"down"`
}

func bucketOf(c float64) int { return min(max(int(c*Buckets), 0), Buckets-1) }

// Feedback returns question q's buckets, lowest first.
func (l *Learner) Feedback(q string) []Bucket {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Bucket, Buckets)
	for i := range out {
		out[i] = Bucket{Low: float64(i) / Buckets, High: float64(i+1) / Buckets}
		if b := l.feedback[q]; b != nil {
			out[i].Up, out[i].Down = b[i].Up, b[i].Down
		}
	}
	return out
}

// Adjusted is the confidence the Learner reports for an answer to question q
// of calibrated confidence c.
func (l *Learner) Adjusted(q string, c float64) float64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.adjustedLocked(q, c)
}

func (l *Learner) adjustedLocked(q string, c float64) float64 {
	b := l.feedback[q]
	if b == nil {
		return c
	}
	k := b[bucketOf(c)]
	return (l.opts.Prior*c + float64(k.Up)) / (l.opts.Prior + float64(k.Up+k.Down))
}

// record adds one answer of confidence c to question q's history.
func (l *Learner) record(q string, c float64, right bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.feedback[q]
	if b == nil {
		b = new([Buckets]Bucket)
		for i := range b {
			b[i] = Bucket{Low: float64(i) / Buckets, High: float64(i+1) / Buckets}
		}
		l.feedback[q] = b
	}
	if right {
		b[bucketOf(c)].Up++
	} else {
		b[bucketOf(c)].Down++
	}
}

// ThumbUp confirms answer as right for question about state: the example joins
// the replay buffer and the calibration history. No weights change. The
// history counts the confirmation for the model's current answer: as right
// when that is answer, as wrong when the model has since moved to another.
func (l *Learner) ThumbUp(ctx context.Context, state, question, answer string) (Event, error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	began := time.Now()
	ev := Event{Kind: KindReinforce, Question: question, VersionBefore: l.current.id, VersionAfter: l.current.id,
		AnchorBefore: l.current.anchor, AnchorAfter: l.current.anchor}
	if answer == "" {
		return ev, fmt.Errorf("ror: a thumb up on question %q names no answer", question)
	}
	it, err := l.newItem(state, question, answer)
	if err != nil {
		return ev, err
	}
	choice, conf, err := l.answer(ctx, it)
	if err != nil {
		return ev, err
	}
	l.record(question, conf, choice == it.label)
	l.remember(it)
	ev.Choice, ev.Confidence, ev.Adjusted = l.m.Task.Questions[it.question].Options[choice].Name, conf, l.Adjusted(question, conf)
	ev.Escalate = ev.Adjusted < l.threshold(question)
	ev.MS = ms(time.Since(began))
	return ev, nil
}

// ThumbDown says the model's answer to question about state is wrong. With
// correct (the right option) it retrains (see Retrain); with correct == "" it
// records: the answer's confidence bucket is lowered and the answer is marked
// for escalation. Either way the calibration history counts the model's
// current answer as wrong.
func (l *Learner) ThumbDown(ctx context.Context, state, question, correct string) (Event, error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	began := time.Now()
	ev := Event{Kind: KindRecord, Question: question, VersionBefore: l.current.id, VersionAfter: l.current.id,
		AnchorBefore: l.current.anchor, AnchorAfter: l.current.anchor}
	it, err := l.newItem(state, question, correct)
	if err != nil {
		return ev, err
	}
	choice, conf, err := l.answer(ctx, it)
	if err != nil {
		return ev, err
	}
	l.record(question, conf, false)
	ev.Choice, ev.Confidence, ev.Adjusted = l.m.Task.Questions[it.question].Options[choice].Name, conf, l.Adjusted(question, conf)
	if correct == "" {
		ev.Escalate = true
		ev.Detail = "no correction: recorded, offered for escalation"
		ev.MS = ms(time.Since(began))
		return ev, nil
	}
	step, err := l.retrain(ctx, []*item{it})
	step.Question, step.Choice, step.Confidence, step.Adjusted = ev.Question, ev.Choice, ev.Confidence, ev.Adjusted
	step.Escalate = step.Adjusted < l.threshold(question)
	step.MS = ms(time.Since(began))
	return step, err
}

// Retrain takes a step on corrections given together (a batch a person
// relabelled), as ThumbDown does on one, without touching the calibration
// history.
func (l *Learner) Retrain(ctx context.Context, corrections []Example) (Event, error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	began := time.Now()
	items := make([]*item, 0, len(corrections))
	for _, c := range corrections {
		if c.Answer == "" {
			return Event{}, fmt.Errorf("ror: a correction of question %q names no answer", c.Question)
		}
		it, err := l.newItem(c.State, c.Question, c.Answer)
		if err != nil {
			return Event{}, err
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return Event{}, fmt.Errorf("ror: no corrections")
	}
	ev, err := l.retrain(ctx, items)
	if q := corrections[0].Question; len(corrections) == 1 || allQuestion(corrections, q) {
		ev.Question = q
	}
	ev.MS = ms(time.Since(began))
	return ev, err
}

func allQuestion(cs []Example, q string) bool {
	for _, c := range cs {
		if c.Question != q {
			return false
		}
	}
	return true
}
