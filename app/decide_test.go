package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/decide"
)

const colorTask = `{"name": "colors", "questions": [
  {"name": "color", "type": "choice", "instruction": "Color?", "prompt": "C", "options": ["red", "green", "blue"]},
  {"name": "ok", "type": "yesno", "instruction": "Fine?", "prompt": "F"}]}`

// colorRowsFile writes n labelled rows (and two bad lines, 3 and 5) for
// colorTask.
func colorRowsFile(t *testing.T, n int) string {
	t.Helper()
	things := []string{"apple", "grass", "sea"}
	colors := []string{"red", "green", "blue"}
	var b strings.Builder
	for i := range n {
		switch i {
		case 2:
			b.WriteString(`{"state": "x", "answers": {"colour": "red"}}` + "\n")
		case 4:
			b.WriteString(`{"state": "", "answers": {"color": "red"}}` + "\n")
		}
		ok := "no"
		state := fmt.Sprintf("my %s is here %d", things[i%3], i)
		if i%2 == 0 {
			ok, state = "yes", state+" fine"
		}
		fmt.Fprintf(&b, `{"state": %q, "answers": {"color": %q, "ok": %q}}`+"\n", state, colors[i%3], ok)
	}
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDecideCommands(t *testing.T) {
	home, model := t.TempDir(), tinyModelDir(t)
	taskFile := filepath.Join(t.TempDir(), "task.json")
	os.WriteFile(taskFile, []byte(colorTask), 0o644)
	rows := colorRowsFile(t, 48)
	out := filepath.Join(t.TempDir(), "colors-model")
	run := func(stdin string, args ...string) (string, string) {
		t.Helper()
		var o, e bytes.Buffer
		args = append(args, "--backend", "cpu", "--data-dir", home)
		if code := Run(context.Background(), args, strings.NewReader(stdin), &o, &e); code != 0 {
			t.Fatalf("%v exited %d:\n%s\n%s", args, code, o.String(), e.String())
		}
		return o.String(), e.String()
	}
	o, e := run("", "decide", "train", "--model", model, "--task", taskFile, "--rows", rows, "--out", out,
		"--iters", "12", "--batch-size", "4", "--rank", "2", "--steps-per-report", "6", "--steps-per-eval", "6",
		"--head-learning-rate", "1e-2", "--threshold", "color=0.5")
	t.Logf("%s%s", o, e)
	for _, want := range []string{"Iter 0: held-out loss", "zero-shot held-out accuracy color", "Iter 6: Train loss",
		"Iter 12: held-out loss", "ECE BEFORE", "Decision model saved to " + out} {
		if !strings.Contains(o, want) {
			t.Errorf("train output lacks %q", want)
		}
	}
	for _, want := range []string{"line 3: unknown question \"colour\"", "line 6: empty state"} {
		if !strings.Contains(e, want) {
			t.Errorf("train warnings lack %q:\n%s", want, e)
		}
	}
	for _, f := range []string{"adapters.safetensors", "adapter_config.json", decide.HeadFile, decide.TaskFile, decide.CalibrationFile, decide.SplitFile, decide.MetaFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	// The store has the run, its curves, the task and a calibration per question.
	w := openTestWorkspace(t, home)
	ctx := context.Background()
	runs, err := w.Store.Runs(ctx, store.RunFilter{Kind: store.KindDecide})
	if err != nil || len(runs) != 1 || runs[0].Status != store.StatusDone || runs[0].Output != out {
		t.Fatalf("decide runs %+v, %v", runs, err)
	}
	for _, name := range []string{"train_loss", "val_loss", "val_accuracy/color", "val_accuracy/ok", "heldout_accuracy/ok", "ece_after/color"} {
		ms, err := w.Store.Metrics(ctx, runs[0].ID, name)
		if err != nil || len(ms) == 0 {
			t.Errorf("metric %s: %v, %v", name, ms, err)
		}
	}
	if ms, _ := w.Store.Metrics(ctx, runs[0].ID, "val_accuracy/color"); len(ms) != 3 || ms[0].Step != 0 {
		t.Errorf("held-out accuracy curve %+v, want steps 0, 6, 12", ms)
	}
	tasks, err := w.Store.DecisionTasks(ctx)
	if err != nil || len(tasks) != 1 || tasks[0].Adapter != out || tasks[0].Name != "colors" {
		t.Fatalf("decision tasks %+v, %v", tasks, err)
	}
	cals, err := w.Store.Calibrations(ctx, tasks[0].ID)
	if err != nil || len(cals) != 2 {
		t.Fatalf("calibrations %+v, %v", cals, err)
	}
	for _, c := range cals {
		if c.RunID != runs[0].ID || len(c.BinsBefore) != 15 || len(c.BinsAfter) != 15 || !(c.Temperature > 0) || c.N == 0 || len(c.Detail) == 0 {
			t.Errorf("calibration %+v", c)
		}
	}
	w.Close()

	// eval on the held-out rows reports the coverage table and the threshold.
	o, _ = run("", "decide", "eval", "--decision-model", out, "--rows", rows, "--heldout")
	for _, want := range []string{"color: ", "ok: ", "THRESHOLD", "threshold 0.50:"} {
		if !strings.Contains(o, want) {
			t.Errorf("eval output lacks %q:\n%s", want, o)
		}
	}

	// predict answers every line in order, errors included.
	in := `{"state": "my apple is here fine"}
not json

{"state": {"note": "the sea"}}
`
	o, _ = run(in, "decide", "predict", "--decision-model", out, "--threshold", "ok=0.99")
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if len(lines) != 3 {
		t.Fatalf("predict wrote %d lines, want 3:\n%s", len(lines), o)
	}
	var answers []struct {
		Line      int                        `json:"line"`
		Decisions map[string]decide.Decision `json:"decisions"`
		Error     string                     `json:"error"`
	}
	for _, l := range lines {
		var a struct {
			Line      int                        `json:"line"`
			Decisions map[string]decide.Decision `json:"decisions"`
			Error     string                     `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, a)
	}
	if answers[0].Line != 1 || answers[1].Line != 2 || answers[1].Error == "" || answers[2].Line != 4 {
		t.Errorf("predict lines %+v", answers)
	}
	for _, a := range []int{0, 2} {
		d := answers[a].Decisions
		if len(d) != 2 || d["color"].Choice == "" || len(d["color"].Probs) != 3 || len(d["ok"].Probs) != 2 {
			t.Errorf("decisions %+v", d)
		}
		if d["ok"].Escalate != (d["ok"].Confidence < 0.99) {
			t.Errorf("ok: confidence %v, escalate %v at 0.99", d["ok"].Confidence, d["ok"].Escalate)
		}
	}
}

func TestDecideWorkspaceAPI(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	taskFile := filepath.Join(t.TempDir(), "task.json")
	os.WriteFile(taskFile, []byte(colorTask), 0o644)
	out := filepath.Join(t.TempDir(), "m")
	spec := DecideSpec{Model: tinyModelDir(t), Task: taskFile, Rows: colorRowsFile(t, 24), Out: out, Iters: 4, BatchSize: 4, Rank: 2}
	if _, err := w.StartDecideTrain(ctx, DecideSpec{Model: spec.Model, Task: taskFile, Thresholds: map[string]float64{"nope": 0.5}}); err == nil {
		t.Error("a threshold for an unknown question: no error")
	}
	job, err := w.StartDecideTrain(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var phases []Phase
	for p := range job.Events {
		if p.Kind != store.KindDecide || p.RunID != job.RunID {
			t.Errorf("progress %+v", p)
		}
		phases = append(phases, p.Phase)
	}
	if err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(phases) == 0 || phases[len(phases)-1] != PhaseDone {
		t.Errorf("phases %v", phases)
	}
	if err := w.SetDecisionThreshold(ctx, out, "color", 0.7); err != nil {
		t.Fatal(err)
	}
	m, err := w.LoadDecisionModel(ctx, out, "")
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Calibration.Questions["color"]; c == nil || c.Threshold != 0.7 {
		t.Errorf("threshold after SetDecisionThreshold: %+v", c)
	}
	ds, _, err := m.Decide(ctx, []string{"my sea is here"})
	if err != nil || len(ds) != 1 || len(ds[0]) != 2 {
		t.Fatalf("Decide: %v, %v", ds, err)
	}
	// The sample task is found by name, with its rows.
	task, _, err := ReadDecisionTask(SampleTask)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ReadDecisionRows(task, SampleTask, "", true)
	if err != nil || len(rep.Rows) < 1000 || rep.Bad != 0 {
		t.Errorf("sample rows: %d rows, %d bad, %v", len(rep.Rows), rep.Bad, err)
	}
}
