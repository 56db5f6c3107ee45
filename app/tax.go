package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/trainer"
)

// The KV-cache tax: teaching a model by putting worked examples in its prompt costs
// cache memory and prefill time on every turn; teaching it by adapting its weights
// costs a training step once and nothing per turn. TaxReport measures both on a
// decision question.

// TaxSpec is what to measure: a model, a question of the bundled ticket task, the
// numbers of worked examples, how many held-out rows to score and how many LoRA
// steps the adapted side trains.
type TaxSpec struct {
	Model    string
	Question string // default "team"
	Shots    []int  // default 0, 4, 16, 64
	Eval     int    // held-out rows scored; default 40
	Steps    int    // LoRA updates on the examples; default 40
}

// TaxSide is one way of teaching the model, measured per held-out row.
type TaxSide struct {
	Fits          bool // false: the prompt is longer than the model's context
	PromptTokens  int
	KVBytes       int64
	TTFT          time.Duration // prompt processing to the first token
	DecodeTPS     float64
	Accuracy      float64 // restricted to the options' first tokens
	TrainDuration time.Duration
}

// TaxRow compares N examples in the prompt with the same N examples learned.
type TaxRow struct {
	Shots              int
	InContext, Adapted TaxSide
}

// TaxReport measures in-context examples against adaptation for each N of spec.
func (w *Workspace) TaxReport(ctx context.Context, spec TaxSpec, progress func(string)) ([]TaxRow, error) {
	if spec.Question == "" {
		spec.Question = "team"
	}
	if len(spec.Shots) == 0 {
		spec.Shots = []int{0, 4, 16, 64}
	}
	if spec.Eval == 0 {
		spec.Eval = 40
	}
	if spec.Steps == 0 {
		spec.Steps = 40
	}
	if progress == nil {
		progress = func(string) {}
	}
	base, info, err := w.SharedModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(info.Path)
	if err != nil {
		return nil, err
	}
	tq, err := loadTaxQuestion(spec.Question)
	if err != nil {
		return nil, err
	}
	optIDs := make([]int, len(tq.options))
	for i, o := range tq.options {
		ids, err := tok.Encode(" "+o, false)
		if err != nil || len(ids) == 0 {
			return nil, fmt.Errorf("option %q does not tokenize", o)
		}
		optIDs[i] = ids[0]
	}
	maxShots := slices.Max(spec.Shots)
	if len(tq.rows) < maxShots+spec.Eval {
		return nil, fmt.Errorf("the task has %d rows, fewer than %d examples and %d held-out", len(tq.rows), maxShots, spec.Eval)
	}
	pool, held := tq.rows[:maxShots], tq.rows[len(tq.rows)-spec.Eval:]
	var out []TaxRow
	for _, n := range spec.Shots {
		progress(fmt.Sprintf("%d examples in the prompt", n))
		row := TaxRow{Shots: n}
		if row.InContext, err = measureSide(ctx, base, tok, tq, pool[:n], held, optIDs); err != nil {
			return out, err
		}
		if n == 0 {
			row.Adapted = row.InContext
		} else {
			progress(fmt.Sprintf("%d examples learned by a LoRA", n))
			m := base.Fork()
			start := time.Now()
			if err := trainOnShots(ctx, m, tok, tq, pool[:n], spec.Steps); err != nil {
				return out, err
			}
			took := time.Since(start)
			if row.Adapted, err = measureSide(ctx, m, tok, tq, nil, held, optIDs); err != nil {
				return out, err
			}
			row.Adapted.TrainDuration = took
		}
		out = append(out, row)
	}
	return out, nil
}

type taxRow struct{ state, answer string }

type taxQuestion struct {
	header  string // the task's instruction, the question's, and its options
	label   string // "Ticket"
	prompt  string // "Team"
	options []string
	rows    []taxRow
}

func loadTaxQuestion(name string) (*taxQuestion, error) {
	taskJSON, rowsJSONL := resources.TicketsTask()
	task, err := decide.ParseTask(taskJSON)
	if err != nil {
		return nil, err
	}
	tq := &taxQuestion{label: task.StateLabel}
	for _, q := range task.Questions {
		if q.Name != name {
			continue
		}
		tq.prompt = q.Prompt
		for _, o := range q.Options {
			tq.options = append(tq.options, o.Name)
		}
		tq.header = fmt.Sprintf("%s\n%s Answer with one of: %s.\n\n", task.Instruction, q.Instruction, strings.Join(tq.options, ", "))
	}
	if tq.prompt == "" {
		return nil, fmt.Errorf("the ticket task has no question %q", name)
	}
	for _, line := range bytes.Split(rowsJSONL, []byte("\n")) {
		var r struct {
			State   json.RawMessage   `json:"state"`
			Answers map[string]string `json:"answers"`
		}
		if json.Unmarshal(line, &r) != nil || r.Answers[name] == "" {
			continue
		}
		s, err := decide.RenderState(r.State)
		if err != nil {
			continue
		}
		tq.rows = append(tq.rows, taxRow{state: s, answer: r.Answers[name]})
	}
	return tq, nil
}

func (tq *taxQuestion) example(r taxRow) string {
	return fmt.Sprintf("%s: %s\n%s: %s\n\n", tq.label, r.state, tq.prompt, r.answer)
}

func (tq *taxQuestion) query(shots []taxRow, r taxRow) string {
	var b strings.Builder
	b.WriteString(tq.header)
	for _, s := range shots {
		b.WriteString(tq.example(s))
	}
	fmt.Fprintf(&b, "%s: %s\n%s:", tq.label, r.state, tq.prompt)
	return b.String()
}

// measureSide scores the held-out rows with shots in each prompt: accuracy from the
// next-token logits over the options' first tokens, and per row the prompt's
// tokens, its KV bytes, the time to the first token and the decode speed.
func measureSide(ctx context.Context, m *inference.Model, tok *tokenizer.Tokenizer, tq *taxQuestion, shots, held []taxRow, optIDs []int) (TaxSide, error) {
	side := TaxSide{Fits: true}
	right := 0
	var ttft time.Duration
	var tps float64
	timed := 0
	for i, r := range held {
		ids, err := tok.Encode(tq.query(shots, r), true)
		if err != nil {
			return side, err
		}
		side.PromptTokens = max(side.PromptTokens, len(ids))
		if limit := m.ContextLength(); limit > 0 && len(ids)+8 > limit {
			side.Fits = false
			return side, nil
		}
		sess := inference.NewSession(m)
		start := time.Now()
		logits, _, err := sess.Prefill(ids)
		if err != nil {
			return side, err
		}
		row, err := logits.Float32s()
		if err != nil {
			return side, err
		}
		if i < 8 { // timing on a few rows is enough
			ttft += time.Since(start)
			st, err := inference.Generate(ctx, sess, ids, inference.GenerateOptions{MaxTokens: 8}, func(int) bool { return false })
			if err != nil {
				return side, err
			}
			tps += st.DecodeTPS
			timed++
		}
		side.KVBytes = max(side.KVBytes, sess.Cache().Bytes())
		best := 0
		for j, id := range optIDs {
			if row[id] > row[optIDs[best]] {
				best = j
			}
		}
		if tq.options[best] == r.answer {
			right++
		}
	}
	side.Accuracy = float64(right) / float64(len(held))
	side.TTFT = ttft / time.Duration(max(timed, 1))
	side.DecodeTPS = tps / float64(max(timed, 1))
	return side, nil
}

// trainOnShots fits a LoRA on m (a fork) to answer the shots with no examples in
// the prompt: the loss is on the answer's tokens only.
func trainOnShots(ctx context.Context, m *inference.Model, tok *tokenizer.Tokenizer, tq *taxQuestion, shots []taxRow, steps int) error {
	var ex []data.Example
	for _, r := range shots {
		prompt, err := tok.Encode(tq.query(nil, r), true)
		if err != nil {
			return err
		}
		answer, err := tok.Encode(" "+r.answer, false)
		if err != nil {
			return err
		}
		e := data.Example{Source: "shot"}
		for _, id := range append(prompt, answer...) {
			e.Tokens = append(e.Tokens, int32(id))
		}
		e.Mask = make([]bool, len(e.Tokens))
		for i := len(prompt); i < len(e.Tokens); i++ {
			e.Mask[i] = true
		}
		ex = append(ex, e)
	}
	_, _, err := trainer.TrainAdapter(ctx, m, ex, trainer.Options{
		LoRA: lora.Config{NumLayers: -1, Rank: 8}, Iters: steps, BatchSize: min(4, len(ex)), LearningRate: 1e-3, StepsPerEval: -1, Seed: 1,
	}, nil)
	return err
}
