package decide

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/calibrate"
)

// Model is a trained (or zero-shot) decision model: a backbone with its
// decision adapter on top, the head, the task and the calibration.
type Model struct {
	Task        *Task
	Calibration *Calibration
	Split       *Split // the split it was trained with; nil for none
	Meta        Meta

	model      *inference.Model // a fork of the base, the decision adapter on top
	adapterCfg *inference.AdapterConfig
	enc        *Encoder
	head       map[string]*mx.Array
}

// Meta is what a saved model records besides its weights, task and
// calibration (decide.json).
type Meta struct {
	Format        int  `json:"format"`
	PromptVersion int  `json:"prompt_version"`
	Marker        int  `json:"marker"`
	MaxSeqLength  int  `json:"max_seq_length"`
	Adapter       bool `json:"adapter"` // adapters.safetensors is there (false: head only)
	Steps         int  `json:"steps"`
	Base          Base `json:"base"`
	Rows          int  `json:"train_rows"`
}

// Base is the backbone a decision model was trained on, as much of it as a
// later load must match.
type Base struct {
	ModelType  string `json:"model_type"`
	HiddenSize int    `json:"hidden_size"`
	VocabSize  int    `json:"vocab_size"`
	Layers     int    `json:"num_hidden_layers"`
	Name       string `json:"name,omitempty"` // how the user named it; informative
}

func baseOf(m *inference.Model) Base {
	c := m.Config()
	return Base{ModelType: c.ModelType, HiddenSize: c.HiddenSize, VocabSize: c.VocabSize, Layers: c.NumHiddenLayers}
}

// Calibration is a decision model's temperatures, thresholds and held-out
// figures, per question (calibration.json).
type Calibration struct {
	Questions map[string]*QuestionCalibration `json:"questions"`
}

// QuestionCalibration is one question's calibration on the held-out split.
type QuestionCalibration struct {
	Temperature float64 `json:"temperature"`
	// Threshold is the confidence below which a decision escalates; 0 never.
	Threshold float64 `json:"threshold"`
	N         int     `json:"n"` // held-out rows that answer the question
	// ZeroShot is the untrained model (step 0, restricted decoding); Before and
	// After are the trained model at temperature 1 and at Temperature.
	ZeroShot calibrate.Metrics `json:"zero_shot"`
	Before   calibrate.Metrics `json:"before"`
	After    calibrate.Metrics `json:"after"`
	// CrossFittedECE is After's ECE with each half of the held-out rows
	// calibrated on the other half: what to expect on new rows. Absent with
	// too few rows.
	CrossFittedECE *float64 `json:"cross_fitted_ece,omitempty"`
	// Coverage is the coverage/accuracy table after calibration, at
	// calibrate.SliderThresholds (0, 0.01, …, 1).
	Coverage []calibrate.CoveragePoint `json:"coverage"`
}

// Decision is the answer to one question about one state.
type Decision struct {
	Question   string             `json:"-"`
	Choice     string             `json:"choice"`
	Confidence float64            `json:"confidence"` // calibrated probability of Choice
	Escalate   bool               `json:"escalate"`   // Confidence is below the question's threshold
	Probs      map[string]float64 `json:"probs"`      // calibrated, every option
	Scores     []float64          `json:"-"`          // the head's raw scores, in option order
}

// temperature is question q's calibrated temperature, 1 when uncalibrated.
func (m *Model) temperature(q string) float64 {
	if c := m.Calibration.question(q); c != nil && c.Temperature > 0 {
		return c.Temperature
	}
	return 1
}

func (c *Calibration) question(q string) *QuestionCalibration {
	if c == nil || c.Questions == nil {
		return nil
	}
	return c.Questions[q]
}

// SetThreshold sets the confidence below which question q's decisions
// escalate (0: never).
func (m *Model) SetThreshold(q string, threshold float64) error {
	if !(threshold >= 0 && threshold <= 1) {
		return fmt.Errorf("decide: threshold %g is not in [0, 1]", threshold)
	}
	if qq, _ := m.Task.Question(q); qq == nil {
		return fmt.Errorf("decide: the task has no question %q", q)
	}
	if m.Calibration == nil {
		m.Calibration = &Calibration{}
	}
	if m.Calibration.Questions == nil {
		m.Calibration.Questions = map[string]*QuestionCalibration{}
	}
	c := m.Calibration.Questions[q]
	if c == nil {
		c = &QuestionCalibration{Temperature: 1}
		m.Calibration.Questions[q] = c
	}
	c.Threshold = threshold
	return nil
}

// DefaultBatchTokens caps the tokens (padding included) of one forward pass
// when deciding many rows.
const DefaultBatchTokens = 16384

// item is one question of one row to score.
type item struct {
	row, question int
	seq           Sequence
	label         int
}

// scoreItems scores the items, batching up to batchTokens tokens per forward
// pass (longest first, so similar lengths share a batch), and returns each
// item's raw scores.
func scoreItems(ctx context.Context, m *inference.Model, head map[string]*mx.Array, t *Task, items []item, batchTokens int, pad int) ([][]float64, error) {
	if batchTokens <= 0 {
		batchTokens = DefaultBatchTokens
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(items[b].seq.Tokens) - len(items[a].seq.Tokens) })
	out := make([][]float64, len(items))
	k := func(q int) int { return len(t.Questions[q].Options) }
	for start := 0; start < len(order); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l := len(items[order[start]].seq.Tokens)
		n := max(1, batchTokens/max(l, 1))
		end := min(start+n, len(order))
		seqs := make([]Sequence, 0, end-start)
		for _, i := range order[start:end] {
			seqs = append(seqs, items[i].seq)
		}
		bt := newBatch(seqs, nil, k, pad)
		ss := scores(m, head, t, bt)
		if err := mx.Eval(ss...); err != nil {
			return nil, fmt.Errorf("decide: scores: %w", err)
		}
		for gi, g := range bt.groups {
			v, err := ss[gi].Float32s()
			if err != nil {
				return nil, err
			}
			kk := k(g.question)
			for j, si := range g.seqs {
				row := make([]float64, kk)
				for c := range row {
					row[c] = float64(v[j*kk+c])
				}
				out[order[start+si]] = row
			}
		}
		start = end
	}
	return out, nil
}

// items lays out the given questions of each state.
func (m *Model) items(states []string, questions []int) ([]item, []bool, error) {
	var items []item
	cut := make([]bool, len(states))
	for r, st := range states {
		toks, err := m.enc.StateTokens(st)
		if err != nil {
			return nil, nil, err
		}
		for _, q := range questions {
			s := m.enc.Sequence(q, toks)
			cut[r] = cut[r] || s.Cut
			items = append(items, item{row: r, question: q, seq: s, label: -1})
		}
	}
	return items, cut, nil
}

// Decide answers every question of the task for each state, in one batched
// pass per DefaultBatchTokens tokens. It holds the backbone's adapters still
// while it runs. cut[i] reports that state i was cut to fit.
func (m *Model) Decide(ctx context.Context, states []string) (out [][]Decision, cut []bool, err error) {
	all := make([]int, len(m.Task.Questions))
	for i := range all {
		all[i] = i
	}
	items, cut, err := m.items(states, all)
	if err != nil {
		return nil, nil, err
	}
	var raw [][]float64
	err = m.model.WithAdapterReadLock(func(uint64) error {
		raw, err = scoreItems(ctx, m.model, m.head, m.Task, items, DefaultBatchTokens, m.enc.Marker())
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	out = make([][]Decision, len(states))
	for i := range out {
		out[i] = make([]Decision, len(m.Task.Questions))
	}
	for i, it := range items {
		out[it.row][it.question] = m.decision(it.question, raw[i])
	}
	return out, cut, nil
}

// decision turns question qi's raw scores into a calibrated Decision.
func (m *Model) decision(qi int, s []float64) Decision {
	q := m.Task.Questions[qi]
	p := calibrate.Softmax(s, m.temperature(q.Name))
	k := calibrate.Argmax(p)
	d := Decision{Question: q.Name, Choice: q.Options[k].Name, Confidence: p[k], Probs: map[string]float64{}, Scores: s}
	for j, o := range q.Options {
		d.Probs[o.Name] = p[j]
	}
	if c := m.Calibration.question(q.Name); c != nil && p[k] < c.Threshold {
		d.Escalate = true
	}
	return d
}

// heldoutScores scores every answered question of rows; per question, the raw
// scores and labels.
func (m *Model) heldoutScores(ctx context.Context, rows []Row) ([][][]float64, [][]int, error) {
	var items []item
	for r, row := range rows {
		toks, err := m.enc.StateTokens(row.State)
		if err != nil {
			return nil, nil, err
		}
		for q := range m.Task.Questions {
			if row.Answered(q) {
				items = append(items, item{row: r, question: q, seq: m.enc.Sequence(q, toks), label: row.Labels[q]})
			}
		}
	}
	var raw [][]float64
	err := m.model.WithAdapterReadLock(func(uint64) error {
		var err error
		raw, err = scoreItems(ctx, m.model, m.head, m.Task, items, DefaultBatchTokens, m.enc.Marker())
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	scores := make([][][]float64, len(m.Task.Questions))
	labels := make([][]int, len(m.Task.Questions))
	for i, it := range items {
		scores[it.question] = append(scores[it.question], raw[i])
		labels[it.question] = append(labels[it.question], it.label)
	}
	return scores, labels, nil
}

// Evaluation is a decision model measured on labelled rows, per question, at
// its calibrated temperatures.
type Evaluation struct {
	Questions map[string]*QuestionEvaluation `json:"questions"`
}

// QuestionEvaluation is one question's figures on the rows that answer it.
type QuestionEvaluation struct {
	Raw        calibrate.Metrics         `json:"uncalibrated"` // temperature 1
	Calibrated calibrate.Metrics         `json:"calibrated"`
	Coverage   []calibrate.CoveragePoint `json:"coverage"`
	// Escalated is the share of rows below the threshold, and Automated the
	// accuracy of the rest.
	Threshold float64 `json:"threshold"`
	Escalated float64 `json:"escalated"`
	Automated float64 `json:"automated_accuracy"`
}

// Evaluate measures m on labelled rows (none of which should be rows it was
// trained on).
func (m *Model) Evaluate(ctx context.Context, rows []Row) (*Evaluation, error) {
	scores, labels, err := m.heldoutScores(ctx, rows)
	if err != nil {
		return nil, err
	}
	ev := &Evaluation{Questions: map[string]*QuestionEvaluation{}}
	for qi, q := range m.Task.Questions {
		if len(scores[qi]) == 0 {
			continue
		}
		t := m.temperature(q.Name)
		raw, _ := calibrate.Evaluate(scores[qi], labels[qi], 1)
		cal, _ := calibrate.Evaluate(scores[qi], labels[qi], t)
		conf, correct := calibrate.Confidences(scores[qi], labels[qi], t)
		qe := &QuestionEvaluation{Raw: raw, Calibrated: cal, Coverage: calibrate.Coverage(conf, correct, calibrate.SliderThresholds)}
		if c := m.Calibration.question(q.Name); c != nil {
			qe.Threshold = c.Threshold
		}
		auto := calibrate.Coverage(conf, correct, []float64{qe.Threshold})[0]
		qe.Escalated, qe.Automated = 1-auto.Coverage, auto.Accuracy
		ev.Questions[q.Name] = qe
	}
	return ev, nil
}

// calibrateOn fits each question's temperature on the held-out rows' scores
// and records the figures before and after, keeping thresholds already set.
func (m *Model) calibrateOn(scores [][][]float64, labels [][]int, zeroShot map[string]calibrate.Metrics, seed uint64) error {
	old := m.Calibration
	m.Calibration = &Calibration{Questions: map[string]*QuestionCalibration{}}
	for qi, q := range m.Task.Questions {
		if len(scores[qi]) == 0 {
			continue
		}
		t, err := calibrate.FitTemperature(scores[qi], labels[qi])
		if err != nil {
			return fmt.Errorf("decide: calibrate %q: %w", q.Name, err)
		}
		c := &QuestionCalibration{Temperature: t, N: len(scores[qi]), ZeroShot: zeroShot[q.Name]}
		if prev := old.question(q.Name); prev != nil {
			c.Threshold = prev.Threshold
		}
		c.Before, _ = calibrate.Evaluate(scores[qi], labels[qi], 1)
		c.After, _ = calibrate.Evaluate(scores[qi], labels[qi], t)
		if cf, err := calibrate.CrossFittedECE(scores[qi], labels[qi], seed); err == nil && !math.IsNaN(cf) {
			c.CrossFittedECE = &cf
		}
		conf, correct := calibrate.Confidences(scores[qi], labels[qi], t)
		c.Coverage = calibrate.Coverage(conf, correct, calibrate.SliderThresholds)
		m.Calibration.Questions[q.Name] = c
	}
	return nil
}
