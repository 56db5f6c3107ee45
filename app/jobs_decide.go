package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/internal/capped"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/trainer"
)

// Decision models through the Workspace: train one on a task file and its rows
// (a run of kind decide, with its metrics, the task and a calibration record
// per question in the store), evaluate it on labelled rows, load it to decide,
// and set the confidence below which a question escalates. The command line
// (inloop decide train|eval|predict) and the window's Decide screen call these.

// The decision-model types as the window sees them; only app imports training.
type (
	DecisionModel      = decide.Model
	Decision           = decide.Decision
	DecisionTask       = store.DecisionTask
	CalibrationRecord  = store.Calibration
	DecisionEvaluation = decide.Evaluation
	DecisionTaskFile   = decide.Task // a task file's questions, parsed
	ReliabilityBin     = calibrate.Bin
	CoveragePoint      = calibrate.CoveragePoint
)

// SampleTask names the bundled sample task (support tickets) in DecideSpec.Task.
const SampleTask = "tickets"

// maxRowsFile caps a rows file read whole.
const maxRowsFile = 1 << 30

// DecideSpec is a decision-model training job. Model and Task are required;
// with Task SampleTask, Rows defaults to the sample's rows. An empty Out puts
// the model under the data directory's decide/ folder.
type DecideSpec struct {
	Model string `json:"model"`
	Task  string `json:"task"` // a task file, or SampleTask
	Rows  string `json:"rows"` // a JSONL rows file
	Out   string `json:"out"`

	Epochs           int     `json:"epochs,omitempty"`
	Iters            int     `json:"iters,omitempty"`
	BatchSize        int     `json:"batch_size,omitempty"`
	LearningRate     float64 `json:"learning_rate,omitempty"`
	HeadLearningRate float64 `json:"head_learning_rate,omitempty"`
	Heldout          float64 `json:"heldout,omitempty"`
	MaxTrainRows     int     `json:"max_train_rows,omitempty"`
	HeadOnly         bool    `json:"head_only,omitempty"`
	NumLayers        int     `json:"num_layers,omitempty"`
	Rank             int     `json:"rank,omitempty"`
	Scale            float64 `json:"scale,omitempty"`
	MaxSeqLength     int     `json:"max_seq_length,omitempty"`
	StepsPerReport   int     `json:"steps_per_report,omitempty"`
	StepsPerEval     int     `json:"steps_per_eval,omitempty"`
	Seed             uint64  `json:"seed,omitempty"`
	// Thresholds are the confidences below which each question escalates.
	Thresholds map[string]float64 `json:"thresholds,omitempty"`
}

func (s DecideSpec) options() decide.Options {
	return decide.Options{
		LoRA:     lora.Config{NumLayers: s.NumLayers, Rank: s.Rank, Scale: s.Scale, Seed: s.Seed},
		HeadOnly: s.HeadOnly, Epochs: s.Epochs, Iters: s.Iters, BatchSize: s.BatchSize, LearningRate: s.LearningRate,
		HeadLearningRate: s.HeadLearningRate, Heldout: s.Heldout, MaxTrainRows: s.MaxTrainRows,
		MaxSeqLength: s.MaxSeqLength, Seed: s.Seed, StepsPerReport: s.StepsPerReport, StepsPerEval: s.StepsPerEval,
	}
}

// ReadDecisionTask reads a task file, or the sample task by its name, with the
// raw bytes the store keeps.
func ReadDecisionTask(name string) (*decide.Task, []byte, error) {
	var raw []byte
	if name == SampleTask && !isFile(name) {
		raw, _ = resources.TicketsTask()
	} else {
		var err error
		if raw, err = capped.ReadFile(name, decide.MaxTaskBytes); err != nil {
			return nil, nil, fmt.Errorf("task: %w", err)
		}
	}
	t, err := decide.ParseTask(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, raw, nil
}

// ReadDecisionRows reads a rows file for task t (the sample's rows for
// SampleTask when path is empty). Bad lines are reported, not fatal.
func ReadDecisionRows(t *decide.Task, taskName, path string, requireAnswers bool) (*decide.RowsReport, error) {
	var r io.Reader
	switch {
	case path == "" && taskName == SampleTask && !isFile(taskName):
		_, rows := resources.TicketsTask()
		r = bytes.NewReader(rows)
	case path == "":
		return nil, errors.New("no rows file")
	case path == "-":
		return nil, errors.New("rows from standard input are for predict only")
	default:
		f, err := capped.Open(path, maxRowsFile)
		if err != nil {
			return nil, fmt.Errorf("rows: %w", err)
		}
		defer f.Close()
		r = f
	}
	rep, err := decide.ParseRows(r, t, decide.ParseOptions{RequireAnswers: requireAnswers})
	if err != nil {
		return nil, err
	}
	if len(rep.Rows) == 0 {
		return rep, fmt.Errorf("%s: no usable rows (%d bad lines)%s", orSample(path), rep.Bad, firstIssue(rep))
	}
	return rep, nil
}

func orSample(path string) string {
	if path == "" {
		return "the sample rows"
	}
	return path
}

func firstIssue(rep *decide.RowsReport) string {
	if len(rep.Issues) == 0 {
		return ""
	}
	return "; first: " + rep.Issues[0].Error()
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// loadBackbone loads a registered model and its tokenizer.
func (w *Workspace) loadBackbone(ctx context.Context, name string) (*inference.Model, *tokenizer.Tokenizer, store.Model, error) {
	m, info, err := w.LoadModel(ctx, name)
	if err != nil {
		return nil, nil, info, err
	}
	tok, err := tokenizer.Load(info.Path)
	if err != nil {
		return nil, nil, info, err
	}
	return m, tok, info, nil
}

// forkBackbone is a fork of the workspace's shared copy of a registered model
// (its weights loaded once for every chat and decision model), with its
// tokenizer: what a loaded decision model runs on.
func (w *Workspace) forkBackbone(ctx context.Context, name string) (*inference.Model, *tokenizer.Tokenizer, error) {
	m, info, err := w.SharedModel(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(info.Path)
	if err != nil {
		return nil, nil, err
	}
	return m.Fork(), tok, nil
}

// StartDecideTrain starts training a decision model and records it as a run
// of kind decide, with the task in the store.
func (w *Workspace) StartDecideTrain(ctx context.Context, spec DecideSpec) (*Job, error) {
	if spec.Model == "" || spec.Task == "" {
		return nil, errors.New("a decision model needs a model and a task")
	}
	task, rawTask, err := ReadDecisionTask(spec.Task)
	if err != nil {
		return nil, err
	}
	for q, th := range spec.Thresholds {
		if qq, _ := task.Question(q); qq == nil || !(th >= 0 && th <= 1) {
			return nil, fmt.Errorf("threshold %s=%g: the task has no such question, or it is not in [0, 1]", q, th)
		}
	}
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	if spec.Out == "" {
		spec.Out = w.path("decide", fmt.Sprintf("%s-%s-%s", safeName(task.Name), safeName(info.Name), time.Now().Format("20060102-150405")))
	}
	if spec.Out, err = filepath.Abs(spec.Out); err != nil {
		return nil, err
	}
	params, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	taskID, err := w.Store.CreateDecisionTask(ctx, store.DecisionTask{Name: task.Name, Model: info.Name, Config: rawTask})
	if err != nil {
		return nil, err
	}
	dataset := spec.Rows
	if dataset == "" {
		dataset = spec.Task + " (sample rows)"
	}
	run := store.Run{Kind: store.KindDecide, Model: info.Name, ModelID: info.ID, Dataset: dataset, Params: params, Output: spec.Out}
	return w.start(ctx, run, func(ctx context.Context, runID int64, emit func(Progress)) (any, string, error) {
		return w.decideTrain(ctx, runID, taskID, task, info.Name, spec, emit)
	})
}

func (w *Workspace) decideTrain(ctx context.Context, runID, taskID int64, task *decide.Task, modelName string, spec DecideSpec, emit func(Progress)) (any, string, error) {
	rep, err := ReadDecisionRows(task, spec.Task, spec.Rows, true)
	if err != nil {
		return nil, "", err
	}
	emit(Progress{Phase: PhaseInfo, Message: fmt.Sprintf("%d rows read, %d bad lines left out", len(rep.Rows), rep.Bad)})
	for _, is := range rep.Issues {
		emit(Progress{Phase: PhaseWarning, Message: is.Error()})
	}
	if rep.Omitted > 0 {
		emit(Progress{Phase: PhaseWarning, Message: fmt.Sprintf("and %d more bad lines", rep.Omitted)})
	}
	base, tok, _, err := w.loadBackbone(ctx, spec.Model)
	if err != nil {
		return nil, "", err
	}
	m, res, err := decide.Train(ctx, base, tok, task, rep.Rows, spec.options(), func(ev decide.Event) {
		w.recordDecideEvent(ctx, runID, ev)
		emit(decideProgress(ev))
	})
	if err != nil {
		return nil, "", err
	}
	m.Meta.Base.Name = modelName
	for q, th := range spec.Thresholds {
		if err := m.SetThreshold(q, th); err != nil {
			return nil, "", err
		}
	}
	if err := m.Save(spec.Out); err != nil {
		return nil, "", err
	}
	bg := context.WithoutCancel(ctx)
	if err := w.Store.SetDecisionTaskAdapter(bg, taskID, spec.Out); err != nil {
		return nil, spec.Out, err
	}
	result := map[string]any{"task_id": taskID, "folder": spec.Out, "steps": res.Steps, "train_rows": res.TrainRows,
		"heldout_rows": res.Heldout, "seconds": res.Duration.Seconds(), "split": filepath.Join(spec.Out, decide.SplitFile)}
	if finite(res.TrainLoss) {
		result["train_loss"] = res.TrainLoss
	}
	questions := map[string]any{}
	for _, q := range task.Questions {
		c := m.Calibration.Questions[q.Name]
		if c == nil {
			continue
		}
		detail, _ := json.Marshal(map[string]any{"zero_shot": c.ZeroShot, "before": withoutBins(c.Before), "after": withoutBins(c.After),
			"cross_fitted_ece": c.CrossFittedECE, "coverage": c.Coverage, "threshold": c.Threshold, "folder": spec.Out})
		if _, err := w.Store.AddCalibration(bg, store.Calibration{TaskID: taskID, RunID: runID, Question: q.Name, Temperature: c.Temperature,
			ECEBefore: c.Before.ECE, ECEAfter: c.After.ECE, Accuracy: c.After.Accuracy, N: c.N,
			BinsBefore: storeBins(c.Before.Bins), BinsAfter: storeBins(c.After.Bins), Detail: detail}); err != nil {
			return result, spec.Out, err
		}
		qr := map[string]any{"zero_shot_accuracy": c.ZeroShot.Accuracy, "accuracy": c.After.Accuracy, "temperature": c.Temperature,
			"ece_before": c.Before.ECE, "ece_after": c.After.ECE, "n": c.N}
		if c.CrossFittedECE != nil {
			qr["cross_fitted_ece"] = *c.CrossFittedECE
		}
		questions[q.Name] = qr
		_ = w.Store.AddMetrics(bg, []store.Metric{
			{RunID: runID, Step: res.Steps, Name: "heldout_accuracy/" + q.Name, Value: c.After.Accuracy, Time: time.Now()},
			{RunID: runID, Step: res.Steps, Name: "ece_before/" + q.Name, Value: c.Before.ECE, Time: time.Now()},
			{RunID: runID, Step: res.Steps, Name: "ece_after/" + q.Name, Value: c.After.ECE, Time: time.Now()},
		})
	}
	result["questions"] = questions
	return result, spec.Out, nil
}

// withoutBins drops the bins, which the store keeps in their own columns.
func withoutBins(m calibrate.Metrics) calibrate.Metrics {
	m.Bins = nil
	return m
}

func storeBins(bins []calibrate.Bin) []store.ReliabilityBin {
	out := make([]store.ReliabilityBin, len(bins))
	for i, b := range bins {
		out[i] = store.ReliabilityBin(b)
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// recordDecideEvent stores a decision-training event's figures as metrics.
func (w *Workspace) recordDecideEvent(ctx context.Context, runID int64, ev decide.Event) {
	w.recordTrainEvent(ctx, runID, ev.Event)
	if ev.Kind != trainer.EventVal {
		return
	}
	now := time.Now()
	var ms []store.Metric
	for q, a := range ev.Accuracy {
		ms = append(ms, store.Metric{RunID: runID, Step: ev.Step, Name: "val_accuracy/" + q, Value: a, Time: now})
	}
	if len(ms) > 0 {
		_ = w.Store.AddMetrics(context.WithoutCancel(ctx), ms)
	}
}

// decideProgress is a decision-training event as a Progress; a held-out
// evaluation names each question's accuracy in Message.
func decideProgress(ev decide.Event) Progress {
	p := trainProgress(ev.Event)
	switch ev.Kind {
	case trainer.EventVal:
		p.Message = "held-out accuracy " + accuracyText(ev.Accuracy)
		p.Values = make(map[string]float64, len(ev.Accuracy))
		for q, a := range ev.Accuracy {
			p.Values["accuracy/"+q] = a
		}
		if ev.Step == 0 {
			p.Message = "zero-shot " + p.Message
		}
	case trainer.EventDone:
		p.Message = fmt.Sprintf("training finished after %d steps", ev.Step)
	}
	return p
}

func accuracyText(acc map[string]float64) string {
	var parts []string
	for _, q := range slices.Sorted(maps.Keys(acc)) {
		parts = append(parts, fmt.Sprintf("%s %.3f", q, acc[q]))
	}
	return strings.Join(parts, ", ")
}

// LoadDecisionModel loads the decision model saved in dir over its backbone:
// model when given, else the one it was trained on (by the name the workspace
// knows it under).
func (w *Workspace) LoadDecisionModel(ctx context.Context, dir, model string) (*decide.Model, error) {
	if model == "" {
		var meta decide.Meta
		raw, err := capped.ReadFile(filepath.Join(dir, decide.MetaFile), 1<<20)
		if err != nil {
			return nil, fmt.Errorf("%s is not a decision model folder: %w", dir, err)
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, decide.MetaFile), err)
		}
		if model = meta.Base.Name; model == "" {
			return nil, fmt.Errorf("%s does not name the model it was trained on; give one", dir)
		}
	}
	base, tok, err := w.forkBackbone(ctx, model)
	if err != nil {
		return nil, err
	}
	return decide.Load(dir, base, tok)
}

// DecisionModels lists the decision models trained in this workspace whose
// folders are still there, newest first.
func (w *Workspace) DecisionModels(ctx context.Context) ([]DecisionTask, error) {
	ts, err := w.Store.DecisionTasks(ctx)
	if err != nil {
		return nil, err
	}
	var out []DecisionTask
	seen := map[string]bool{}
	for _, t := range ts {
		if t.Adapter == "" || seen[t.Adapter] || !isFile(filepath.Join(t.Adapter, decide.MetaFile)) {
			continue
		}
		seen[t.Adapter] = true
		out = append(out, t)
	}
	return out, nil
}

// SetDecisionThreshold sets, in the saved model in dir, the confidence below
// which question's decisions escalate.
func (w *Workspace) SetDecisionThreshold(ctx context.Context, dir, question string, threshold float64) error {
	var cal decide.Calibration
	raw, err := capped.ReadFile(filepath.Join(dir, decide.CalibrationFile), 64<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &cal); err != nil {
		return fmt.Errorf("%s: %w", decide.CalibrationFile, err)
	}
	m := &decide.Model{Calibration: &cal}
	taskRaw, err := capped.ReadFile(filepath.Join(dir, decide.TaskFile), decide.MaxTaskBytes)
	if err != nil {
		return err
	}
	if m.Task, err = decide.ParseTask(taskRaw); err != nil {
		return err
	}
	if err := m.SetThreshold(question, threshold); err != nil {
		return err
	}
	return m.SaveCalibration(dir)
}

// DecideEvalSpec is an evaluation of a saved decision model on labelled rows:
// the rows file (default: the held-out rows of the sample task's rows when the
// model was trained on them, else required).
type DecideEvalSpec struct {
	Dir   string `json:"dir"`
	Model string `json:"model,omitempty"`
	Rows  string `json:"rows,omitempty"`
	// Heldout keeps only the rows the model's split held out (for a rows file
	// it was trained on).
	Heldout bool `json:"heldout,omitempty"`
	// Thresholds replace the saved ones for this evaluation.
	Thresholds map[string]float64 `json:"thresholds,omitempty"`
}

// StartDecideEval starts an evaluation, recorded as a run of kind decide whose
// result is the evaluation.
func (w *Workspace) StartDecideEval(ctx context.Context, spec DecideEvalSpec) (*Job, error) {
	m, err := w.LoadDecisionModel(ctx, spec.Dir, spec.Model)
	if err != nil {
		return nil, err
	}
	for q, t := range spec.Thresholds {
		if err := m.SetThreshold(q, t); err != nil {
			return nil, err
		}
	}
	params, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	run := store.Run{Kind: store.KindDecide, Model: m.Meta.Base.Name, Dataset: orSample(spec.Rows), Params: params, Output: spec.Dir}
	return w.start(ctx, run, func(ctx context.Context, runID int64, emit func(Progress)) (any, string, error) {
		taskName := ""
		if spec.Rows == "" {
			taskName = SampleTask
		}
		rep, err := ReadDecisionRows(m.Task, taskName, spec.Rows, true)
		if err != nil {
			return nil, "", err
		}
		rows := rep.Rows
		if spec.Heldout {
			if m.Split == nil {
				return nil, "", errors.New("the decision model has no split to take held-out rows from")
			}
			if _, rows, err = m.Split.Apply(rows); err != nil {
				return nil, "", fmt.Errorf("--heldout needs the rows the model was trained on: %w", err)
			}
		}
		emit(Progress{Phase: PhaseInfo, Message: fmt.Sprintf("evaluating on %d rows (%d bad lines left out)", len(rows), rep.Bad)})
		ev, err := m.Evaluate(ctx, rows)
		if err != nil {
			return nil, "", err
		}
		now := time.Now()
		var ms []store.Metric
		for q, qe := range ev.Questions {
			ms = append(ms, store.Metric{RunID: runID, Name: "accuracy/" + q, Value: qe.Calibrated.Accuracy, Time: now},
				store.Metric{RunID: runID, Name: "ece/" + q, Value: qe.Calibrated.ECE, Time: now})
		}
		_ = w.Store.AddMetrics(context.WithoutCancel(ctx), ms)
		return ev, spec.Dir, nil
	})
}
