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
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/inloop/inloop/internal/capped"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
)

// The decide command: thin flag parsing over the Workspace's decision-model
// jobs (jobs_decide.go).

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
