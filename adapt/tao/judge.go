package tao

import (
	"context"
	"errors"
	"fmt"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/training/decide"
)

// Rated is one reply a person rated in a chat: the prompt it answered, the
// reply, the thumb (+1 up, −1 down) and, with a thumb down, the corrected
// answer when they gave one.
type Rated struct {
	Prompt     string
	Answer     string
	Thumb      int
	Correction string
}

// MinJudgeRows is the fewest rated answers TrainJudge learns from: fewer
// cannot be split into a training and a held-out part worth calibrating on.
const MinJudgeRows = 8

// ErrTooFewRatings reports a feedback history too small, or too one-sided, to
// train a judge on.
var ErrTooFewRatings = errors.New("tao: too few rated answers to train a judge")

// judgeTaskJSON is the judge's decision task: one yes/no question about an
// exchange.
const judgeTaskJSON = `{"name": "answer-judge", "state_label": "Exchange",
 "instruction": "A person asked something and an assistant answered.",
 "questions": [{"name": "good", "type": "yesno", "prompt": "Good",
   "instruction": "Is this answer good: would the person who asked give it a thumbs up?"}]}`

// JudgeQuestion is the name of the judge task's yes/no question.
const JudgeQuestion = "good"

// JudgeTask is the decision task a judge answers: "is this answer good: yes
// or no", about the state JudgeState writes.
func JudgeTask() *decide.Task {
	t, err := decide.ParseTask([]byte(judgeTaskJSON))
	if err != nil {
		panic(err) // a constant that must parse
	}
	return t
}

// JudgeState is the text a judge reads for one answer.
func JudgeState(prompt, answer string) string {
	return "Prompt: " + prompt + "\nAnswer: " + answer
}

// JudgeRows turns the feedback history into the judge's training rows: a
// thumb up is a good answer, a thumb down a bad one, and a correction is a
// good answer to the same prompt.
func JudgeRows(rated []Rated) []decide.Row {
	q := JudgeTask().Questions[0]
	yes, no := q.OptionIndex("yes"), q.OptionIndex("no")
	var rows []decide.Row
	add := func(prompt, answer string, label int) {
		rows = append(rows, decide.Row{Line: len(rows) + 1, State: JudgeState(prompt, answer), Labels: []int{label}})
	}
	for _, r := range rated {
		switch {
		case r.Thumb > 0:
			add(r.Prompt, r.Answer, yes)
		case r.Thumb < 0:
			add(r.Prompt, r.Answer, no)
			if r.Correction != "" {
				add(r.Prompt, r.Correction, yes)
			}
		}
	}
	return rows
}

// TrainJudge trains a judge's decision model over base on the feedback
// history (JudgeRows; at least MinJudgeRows, some good and some bad): the
// decision model's own training, split, held-out calibration and all. base is
// left alone.
func TrainJudge(ctx context.Context, base *inference.Model, tok *tokenizer.Tokenizer, rated []Rated, opts decide.Options, onEvent func(decide.Event)) (*decide.Model, decide.Result, error) {
	rows := JudgeRows(rated)
	good := 0
	for _, r := range rows {
		if r.Labels[0] == JudgeTask().Questions[0].OptionIndex("yes") {
			good++
		}
	}
	if len(rows) < MinJudgeRows || good == 0 || good == len(rows) {
		return nil, decide.Result{}, fmt.Errorf("%w: %d rated answers, %d of them good; want at least %d with both kinds", ErrTooFewRatings, len(rows), good, MinJudgeRows)
	}
	return decide.Train(ctx, base, tok, JudgeTask(), rows, opts, onEvent)
}

// Judge is the decision-model reward: the calibrated probability that the
// answer is good, from a decision model whose task has a yes/no question (by
// default JudgeTask's, trained by TrainJudge; any saved decision model with a
// yes/no question about JudgeState's text works).
type Judge struct {
	Model    *decide.Model
	question string
}

// NewJudge wraps a decision model; question names its yes/no question (""
// takes JudgeQuestion, or the task's only yes/no question).
func NewJudge(m *decide.Model, question string) (*Judge, error) {
	if question == "" {
		question = JudgeQuestion
		if q, _ := m.Task.Question(question); q == nil {
			for _, q := range m.Task.Questions {
				if q.Type == decide.YesNo {
					question = q.Name
					break
				}
			}
		}
	}
	q, _ := m.Task.Question(question)
	if q == nil || q.Type != decide.YesNo {
		return nil, fmt.Errorf("tao: judge: decision task %q has no yes/no question %q", m.Task.Name, question)
	}
	return &Judge{Model: m, question: question}, nil
}

// Name is "judge".
func (j *Judge) Name() string { return "judge" }

// Score is the judge's calibrated probability of "yes" for each answer.
func (j *Judge) Score(ctx context.Context, items []Item) ([]float64, error) {
	states := make([]string, len(items))
	for i, it := range items {
		states[i] = JudgeState(it.Prompt, it.Answer)
	}
	ds, _, err := j.Model.Decide(ctx, states)
	if err != nil {
		return nil, fmt.Errorf("tao: judge: %w", err)
	}
	q, qi := j.Model.Task.Question(j.question)
	yes := q.Options[q.OptionIndex("yes")].Name
	out := make([]float64, len(items))
	for i := range ds {
		out[i] = ds[i][qi].Probs[yes]
	}
	return out, nil
}
