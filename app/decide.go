package app

import (
	"bufio"
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
	"text/tabwriter"
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
	base, tok, _, err := w.loadBackbone(ctx, model)
	if err != nil {
		return nil, err
	}
	return decide.Load(dir, base, tok)
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

func init() {
	register(command{name: "decide", summary: "decision models: 'decide train' on a task and labelled rows, 'decide eval' on labelled rows, 'decide predict' JSONL rows", run: decideCmd})
}

func decideCmd(e *env, args []string) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, `Usage: inloop decide train --model NAME --task FILE|tickets [--rows FILE] [--out DIR] [flags]
       inloop decide eval --decision-model DIR [--rows FILE] [--heldout] [--threshold Q=T,... [--save]]
       inloop decide predict --decision-model DIR [--rows FILE|-] [--threshold Q=T,...]
Run 'inloop decide SUBCOMMAND -h' for its flags.`)
	}
	if len(args) == 0 {
		usage(e.stderr)
		return errors.New("decide needs a subcommand: train, eval or predict")
	}
	switch args[0] {
	case "train":
		return decideTrainCmd(e, args[1:])
	case "eval":
		return decideEvalCmd(e, args[1:])
	case "predict":
		return decidePredictCmd(e, args[1:])
	case "-h", "--help", "help":
		usage(e.stdout)
		return nil
	}
	usage(e.stderr)
	return fmt.Errorf("unknown decide subcommand %q", args[0])
}

// thresholdFlag parses "team=0.9,refund=0.8".
type thresholdFlag map[string]float64

func (f thresholdFlag) String() string {
	var parts []string
	for _, q := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, fmt.Sprintf("%s=%g", q, f[q]))
	}
	return strings.Join(parts, ",")
}

func (f thresholdFlag) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		q, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%q: want QUESTION=CONFIDENCE", part)
		}
		var t float64
		if _, err := fmt.Sscanf(v, "%g", &t); err != nil || !(t >= 0 && t <= 1) {
			return fmt.Errorf("%q: the confidence must be a number in [0, 1]", part)
		}
		f[q] = t
	}
	return nil
}

func decideTrainCmd(e *env, args []string) error {
	fs := newFlags("decide train", e.stderr)
	var s DecideSpec
	fs.StringVar(&s.Model, "model", "", "backbone: demo, a folder, a pulled ORG/NAME or a remembered name (a quantized one trains QLoRA)")
	fs.StringVar(&s.Task, "task", "", "task file (JSON), or 'tickets' for the bundled sample task")
	fs.StringVar(&s.Rows, "rows", "", "labelled rows (JSONL); default with --task tickets: the sample's 2,000 rows")
	fs.StringVar(&s.Out, "out", "", "folder for the decision model (default: decide/TASK-MODEL-TIME under the data directory)")
	fs.IntVar(&s.Epochs, "epochs", decide.DefaultEpochs, "passes over the training rows")
	fs.IntVar(&s.Iters, "iters", 0, "updates; when set it replaces --epochs")
	fs.IntVar(&s.BatchSize, "batch-size", decide.DefaultBatchSize, "rows per update")
	fs.Float64Var(&s.LearningRate, "learning-rate", decide.DefaultLearningRate, "the adapter's peak learning rate")
	fs.Float64Var(&s.HeadLearningRate, "head-learning-rate", decide.DefaultHeadLearningRate, "the head's peak learning rate")
	fs.Float64Var(&s.Heldout, "heldout", decide.DefaultHeldout, "share of rows held out for measuring and calibrating")
	fs.IntVar(&s.MaxTrainRows, "max-train-rows", 0, "train on this many of the training rows (0: all); the held-out rows stay the same")
	fs.BoolVar(&s.HeadOnly, "head-only", false, "train the head alone, no adapter")
	fs.IntVar(&s.NumLayers, "num-layers", -1, "adapt the last N blocks; -1 for all")
	fs.IntVar(&s.Rank, "rank", decide.DefaultRank, "LoRA rank")
	fs.Float64Var(&s.Scale, "scale", decide.DefaultScale, "LoRA scale")
	fs.IntVar(&s.MaxSeqLength, "max-seq-length", 0, "longest sequence; a longer ticket is cut (default: the model's, at most 1024)")
	fs.IntVar(&s.StepsPerReport, "steps-per-report", decide.DefaultStepsPerReport, "updates between progress lines")
	fs.IntVar(&s.StepsPerEval, "steps-per-eval", 0, "updates between held-out measurements for the curves (0: each epoch, -1: start and end only)")
	fs.Uint64Var(&s.Seed, "seed", 0, "random seed (split, sampling, adapter)")
	th := thresholdFlag{}
	fs.Var(th, "threshold", "escalate below these confidences, e.g. team=0.9,refund=0.8")
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.Model == "" || s.Task == "" {
		return errors.New("--model and --task are required")
	}
	s.Thresholds = th
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	job, err := w.StartDecideTrain(e.ctx, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Run %d: training a decision model for %s on %s\n", job.RunID, s.Task, s.Model)
	for p := range job.Events {
		printDecideProgress(e.stdout, e.stderr, p)
	}
	if err := job.Wait(); err != nil {
		return err
	}
	var res struct {
		Folder    string `json:"folder"`
		Questions map[string]struct {
			ZeroShot float64  `json:"zero_shot_accuracy"`
			Accuracy float64  `json:"accuracy"`
			T        float64  `json:"temperature"`
			Before   float64  `json:"ece_before"`
			After    float64  `json:"ece_after"`
			CrossFit *float64 `json:"cross_fitted_ece"`
			N        int      `json:"n"`
		} `json:"questions"`
	}
	if err := json.Unmarshal(job.Result(), &res); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "\nOn the held-out rows:")
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "QUESTION\tROWS\tZERO-SHOT\tACCURACY\tTEMPERATURE\tECE BEFORE\tECE AFTER\tCROSS-FITTED")
	for _, q := range slices.Sorted(maps.Keys(res.Questions)) {
		r := res.Questions[q]
		cf := "-"
		if r.CrossFit != nil {
			cf = fmt.Sprintf("%.3f", *r.CrossFit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.2f\t%.3f\t%.3f\t%s\n", q, r.N, r.ZeroShot, r.Accuracy, r.T, r.Before, r.After, cf)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "Decision model saved to %s\nTry it: inloop decide predict --decision-model %s --rows FILE\n", res.Folder, res.Folder)
	return nil
}

// printDecideProgress prints a decision-training event: held-out figures in
// their own words, the rest as training prints them.
func printDecideProgress(stdout, stderr io.Writer, p Progress) {
	if p.Phase == PhaseVal {
		fmt.Fprintf(stdout, "Iter %d: held-out loss %.3f, %s\n", p.Step, p.ValLoss, p.Message)
		return
	}
	printProgress(stdout, stderr, p)
}

func decideEvalCmd(e *env, args []string) error {
	fs := newFlags("decide eval", e.stderr)
	var s DecideEvalSpec
	fs.StringVar(&s.Dir, "decision-model", "", "the decision model's folder (what decide train wrote)")
	fs.StringVar(&s.Model, "model", "", "backbone (default: the one it was trained on)")
	fs.StringVar(&s.Rows, "rows", "", "labelled rows (JSONL); default: the sample task's rows")
	fs.BoolVar(&s.Heldout, "heldout", false, "only the rows the model's split held out (for the rows it was trained on)")
	th := thresholdFlag{}
	fs.Var(th, "threshold", "escalate below these confidences, e.g. team=0.9")
	save := fs.Bool("save", false, "keep --threshold in the decision model")
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.Dir == "" {
		return errors.New("--decision-model is required")
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	s.Thresholds = th
	job, err := w.StartDecideEval(e.ctx, s)
	if err != nil {
		return err
	}
	for p := range job.Events {
		printProgress(e.stdout, e.stderr, p)
	}
	if err := job.Wait(); err != nil {
		return err
	}
	var ev decide.Evaluation
	if err := json.Unmarshal(job.Result(), &ev); err != nil {
		return err
	}
	for _, q := range slices.Sorted(maps.Keys(ev.Questions)) {
		qe := ev.Questions[q]
		fmt.Fprintf(e.stdout, "\n%s: %d rows, accuracy %.3f, NLL %.3f, Brier %.3f, ECE %.3f (uncalibrated %.3f)\n",
			q, qe.Calibrated.N, qe.Calibrated.Accuracy, qe.Calibrated.NLL, qe.Calibrated.Brier, qe.Calibrated.ECE, qe.Raw.ECE)
		if qe.Threshold > 0 {
			fmt.Fprintf(e.stdout, "  threshold %.2f: %.1f%% escalated, the rest %.3f accurate\n", qe.Threshold, 100*qe.Escalated, qe.Automated)
		}
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "  THRESHOLD\tAUTO-DECIDED\tACCURACY")
		for _, p := range qe.Coverage {
			if calibrate.IsDefaultThreshold(p.Threshold) {
				fmt.Fprintf(tw, "  %.2f\t%.1f%%\t%.3f\n", p.Threshold, 100*p.Coverage, p.Accuracy)
			}
		}
		tw.Flush()
	}
	if *save {
		for q, t := range th {
			if err := w.SetDecisionThreshold(e.ctx, s.Dir, q, t); err != nil {
				return err
			}
		}
		if len(th) > 0 {
			fmt.Fprintf(e.stdout, "\nThresholds %s saved in %s\n", th, s.Dir)
		}
	}
	return nil
}

// predictChunk is how many input lines predict decides in one batch.
const predictChunk = 32

func decidePredictCmd(e *env, args []string) error {
	fs := newFlags("decide predict", e.stderr)
	dir := fs.String("decision-model", "", "the decision model's folder (what decide train wrote)")
	model := fs.String("model", "", "backbone (default: the one it was trained on)")
	rows := fs.String("rows", "-", "rows to decide (JSONL with a state each); - reads standard input")
	th := thresholdFlag{}
	fs.Var(th, "threshold", "escalate below these confidences for this run, e.g. team=0.9")
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--decision-model is required")
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	m, err := w.LoadDecisionModel(e.ctx, *dir, *model)
	if err != nil {
		return err
	}
	for q, t := range th {
		if err := m.SetThreshold(q, t); err != nil {
			return err
		}
	}
	in := e.stdin
	if *rows != "-" {
		f, err := capped.Open(*rows, maxRowsFile)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	return PredictRows(e.ctx, m, in, e.stdout)
}

// PredictRows decides every JSONL row of in and writes one JSON object per
// row to out, in input order: {"line", "decisions": {question: decision}}, or
// {"line", "error"} for a line that is not a usable row; blank lines are
// skipped. Rows are decided predictChunk lines at a time, so output follows
// input as it arrives.
func PredictRows(ctx context.Context, m *decide.Model, in io.Reader, out io.Writer) error {
	type answer struct {
		Line      int                        `json:"line"`
		Decisions map[string]decide.Decision `json:"decisions,omitempty"`
		Cut       bool                       `json:"cut,omitempty"`
		Error     string                     `json:"error,omitempty"`
	}
	enc := json.NewEncoder(out)
	br := bufio.NewReaderSize(in, 64<<10)
	lineNo := 0
	for eof := false; !eof; {
		var chunk bytes.Buffer
		var lines []int // original line number of each line of chunk
		var answers []answer
		for len(lines) < predictChunk && !eof {
			text, tooLong, err := readCappedLine(br, decide.MaxRowBytes)
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return err
			}
			if eof && len(text) == 0 && !tooLong {
				break
			}
			lineNo++
			switch {
			case tooLong:
				answers = append(answers, answer{Line: lineNo, Error: fmt.Sprintf("longer than %d bytes", decide.MaxRowBytes)})
			case len(bytes.TrimSpace(text)) > 0:
				chunk.Write(text)
				chunk.WriteByte('\n')
				lines = append(lines, lineNo)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rep, err := decide.ParseRows(&chunk, m.Task, decide.ParseOptions{})
		if err != nil {
			return err
		}
		states := make([]string, len(rep.Rows))
		for i, r := range rep.Rows {
			states[i] = r.State
		}
		ds, cut, err := m.Decide(ctx, states)
		if err != nil {
			return err
		}
		for i, r := range rep.Rows {
			a := answer{Line: lines[r.Line-1], Decisions: map[string]decide.Decision{}, Cut: cut[i]}
			for _, d := range ds[i] {
				a.Decisions[d.Question] = d
			}
			answers = append(answers, a)
		}
		for _, is := range rep.Issues {
			answers = append(answers, answer{Line: lines[is.Line-1], Error: is.Problem})
		}
		slices.SortFunc(answers, func(a, b answer) int { return a.Line - b.Line })
		for _, a := range answers {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// readCappedLine reads one line without its newline; a line over limit bytes
// is consumed whole and reported as too long.
func readCappedLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+2 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }
