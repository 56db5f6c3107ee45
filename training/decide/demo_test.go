package decide

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/training/calibrate"
)

// The measurement behind README's "Decision models" table: the bundled demo
// model on the sample tickets task, zero-shot and trained on a number of rows,
// scored on the held-out split. Minutes per size on two cores, so it runs only
// when asked:
//
//	go test ./training/decide -run TestDemoTickets -timeout 3h -v -args -demo 50,200,all
var (
	demoRun     = flag.String("demo", "", "train on the sample tickets task with the bundled demo model: comma-separated row counts, e.g. 50,200,all (slow)")
	demoSteps   = flag.Int("demo-min-steps", 200, "at least this many updates per size")
	demoEpochs  = flag.Int("demo-epochs", 3, "passes over the training rows, when that is more than -demo-min-steps")
	demoLR      = flag.Float64("demo-lr", 0, "adapter learning rate (0: the default)")
	demoHeadLR  = flag.Float64("demo-head-lr", 0, "head learning rate (0: the default)")
	demoEvalOut = flag.String("demo-out", "", "write the figures as JSON to this file")
	demoEval    = flag.Int("demo-eval-every", -1, "held-out curve every N updates (-1: only at the start and the end)")
	demoSave    = flag.String("demo-save", "", "save the last size's decision model into this folder (its backbone named demo)")
)

// demoModel writes the bundled demo model to a folder and loads it.
func demoModel(t testing.TB) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.CopyFS(dir, resources.DemoFS()); err != nil {
		t.Fatal(err)
	}
	return loadTiny(t, dir)
}

func ticketsTask(t testing.TB) (*Task, []Row, map[int]string) {
	t.Helper()
	taskJSON, rowsJSONL := resources.TicketsTask()
	task, err := ParseTask(taskJSON)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseRows(bytes.NewReader(rowsJSONL), task, ParseOptions{RequireAnswers: true})
	if err != nil || rep.Bad > 0 {
		t.Fatalf("rows: %v %v", err, rep.Err())
	}
	cases := map[int]string{}
	for i, line := range bytes.Split(rowsJSONL, []byte("\n")) {
		var r struct{ Case string }
		if json.Unmarshal(line, &r) == nil && r.Case != "" {
			cases[i+1] = r.Case
		}
	}
	return task, rep.Rows, cases
}

type demoFigures struct {
	Rows      string                          `json:"rows"`
	Steps     int                             `json:"steps"`
	Seconds   float64                         `json:"seconds"`
	Questions map[string]*QuestionCalibration `json:"questions"`
	Cases     map[string]float64              `json:"case_accuracy"` // held-out accuracy of both questions per hard case
}

func TestDemoTickets(t *testing.T) {
	if *demoRun == "" {
		t.Skip("run with -args -demo 50,200,all")
	}
	base, tok := demoModel(t)
	task, rows, cases := ticketsTask(t)
	split, err := MakeSplit(rows, DefaultHeldout, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, held, _ := split.Apply(rows)
	ctx := context.Background()
	var out []demoFigures

	zs, err := ZeroShot(base, tok, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	scores, labels, err := zs.heldoutScores(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	zs.Split = split
	if err := zs.calibrateOn(scores, labels, nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range zs.Calibration.Questions {
		c.ZeroShot = c.Before
	}
	out = append(out, demoFigures{Rows: "0 (zero-shot)", Seconds: time.Since(began).Seconds(), Questions: zs.Calibration.Questions, Cases: caseAccuracy(t, zs, held, cases)})
	t.Logf("zero-shot on %d held-out rows in %s", len(held), time.Since(began).Round(time.Second))

	for _, size := range strings.Split(*demoRun, ",") {
		n := 0
		if size != "all" {
			if n, err = strconv.Atoi(size); err != nil {
				t.Fatalf("-demo %q: %v", size, err)
			}
		}
		trainRows := len(split.Train)
		if n > 0 {
			trainRows = min(n, trainRows)
		}
		iters := max(*demoSteps, (*demoEpochs*trainRows+DefaultBatchSize-1)/DefaultBatchSize)
		began := time.Now()
		m, res, err := Train(ctx, base, tok, task, rows, Options{Split: split, MaxTrainRows: n, Iters: iters, StepsPerEval: *demoEval,
			LearningRate: *demoLR, HeadLearningRate: *demoHeadLR}, func(ev Event) {
			switch ev.Kind.String() {
			case "train":
				if ev.Step%50 == 0 {
					t.Logf("%s rows: step %d/%d loss %.4f (%.0f tok/s, %s)", size, ev.Step, ev.Iters, ev.Loss, ev.TokensPerSec, time.Since(began).Round(time.Second))
				}
			case "val":
				t.Logf("%s rows: step %d held-out loss %.4f accuracy %v", size, ev.Step, ev.ValLoss, ev.Accuracy)
			case "info", "warning":
				t.Logf("%s rows: %s", size, ev.Message)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, demoFigures{Rows: fmt.Sprint(res.TrainRows), Steps: res.Steps, Seconds: time.Since(began).Seconds(),
			Questions: m.Calibration.Questions, Cases: caseAccuracy(t, m, held, cases)})
		if *demoSave != "" {
			m.Meta.Base.Name = "demo"
			if err := m.Save(*demoSave); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Log("\n" + demoTable(task, out))
	if *demoEvalOut != "" {
		data, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(*demoEvalOut, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// caseAccuracy is the held-out accuracy (both questions together) per hard
// case of the generator.
func caseAccuracy(t *testing.T, m *Model, held []Row, cases map[int]string) map[string]float64 {
	var states []string
	for _, r := range held {
		states = append(states, r.State)
	}
	ds, _, err := m.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	right, total := map[string]int{}, map[string]int{}
	for i, r := range held {
		c := cases[r.Line]
		if c == "" {
			c = "plain"
		}
		for q := range m.Task.Questions {
			if r.Answered(q) {
				total[c]++
				if m.Task.Questions[q].OptionIndex(ds[i][q].Choice) == r.Labels[q] {
					right[c]++
				}
			}
		}
	}
	out := map[string]float64{}
	for c, n := range total {
		out[c] = float64(right[c]) / float64(n)
	}
	return out
}

func demoTable(task *Task, figs []demoFigures) string {
	var b strings.Builder
	b.WriteString("| training rows | steps | minutes |")
	for _, q := range task.Questions {
		fmt.Fprintf(&b, " %s accuracy | %s ECE before → after (cross-fitted) | %s T |", q.Name, q.Name, q.Name)
	}
	b.WriteString("\n|---|---|---|")
	for range task.Questions {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %s | %d | %.1f |", f.Rows, f.Steps, f.Seconds/60)
		for _, q := range task.Questions {
			c := f.Questions[q.Name]
			cf := "–"
			if c.CrossFittedECE != nil {
				cf = fmt.Sprintf("%.3f", *c.CrossFittedECE)
			}
			fmt.Fprintf(&b, " %.3f | %.3f → %.3f (%s) | %.2f |", c.After.Accuracy, c.Before.ECE, c.After.ECE, cf, c.Temperature)
		}
		b.WriteString("\n")
	}
	var names []string
	for c := range figs[0].Cases {
		names = append(names, c)
	}
	slices.Sort(names)
	b.WriteString("\nheld-out accuracy per case (both questions):\n| training rows |")
	for _, c := range names {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n")
	for _, f := range figs {
		b.WriteString("| " + f.Rows + " |")
		for _, c := range names {
			fmt.Fprintf(&b, " %.2f |", f.Cases[c])
		}
		b.WriteString("\n")
	}
	coverage := figs[len(figs)-1]
	for _, q := range task.Questions {
		fmt.Fprintf(&b, "\ncoverage/accuracy, %s, %s training rows:\n| threshold | auto-decided | accuracy |\n|---|---|---|\n", q.Name, coverage.Rows)
		for _, p := range coverage.Questions[q.Name].Coverage {
			if calibrate.IsDefaultThreshold(p.Threshold) {
				fmt.Fprintf(&b, "| %.2f | %.0f%% | %.3f |\n", p.Threshold, 100*p.Coverage, p.Accuracy)
			}
		}
	}
	return b.String()
}
