package ui

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"

	"github.com/inloop/inloop/app"
)

// A task defined elsewhere, imported, trained on from the Decide screen with
// live curves; then its calibration, a threshold chosen with the slider, and
// the try-it box with a confirmation, a correction that retrains, and undo.
func TestDecideScreenTrainCalibrateTryAndCorrect(t *testing.T) {
	u, ws := openUI(t, t.TempDir())
	s := u.decide
	taskFile := filepath.Join(t.TempDir(), "colors.json")
	os.WriteFile(taskFile, []byte(`{"name": "colors", "instruction": "a sentence about a thing", "questions": [
  {"name": "color", "type": "choice", "instruction": "What color is the thing?", "options": ["red", "green", "blue"]},
  {"name": "ok", "type": "yesno", "instruction": "Is it fine?"}]}`), 0o644)
	var rows strings.Builder
	things, colors := []string{"apple", "grass", "sea"}, []string{"red", "green", "blue"}
	for i := range 36 {
		ok, state := "no", fmt.Sprintf("my %s is here %d", things[i%3], i)
		if i%2 == 0 {
			ok, state = "yes", state+" and fine"
		}
		fmt.Fprintf(&rows, `{"state": %q, "answers": {"color": %q, "ok": %q}}`+"\n", state, colors[i%3], ok)
	}
	rowsFile := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(rowsFile, []byte(rows.String()), 0o644)

	locked(u, func() {
		u.show("Decide")
		s.importTask(taskFile)
	})
	if s.task.Selected != "colors" || !strings.Contains(s.taskInfo.Text, "color (red, green, blue); ok (yes/no)") {
		t.Fatalf("imported task: %q, %q", s.task.Selected, s.taskInfo.Text)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir, "decide", "tasks", "colors.json")); err != nil {
		t.Errorf("the imported task is not kept in the workspace: %v", err)
	}
	locked(u, func() {
		s.model.SetSelected("demo")
		s.rows.SetText(rowsFile)
		s.rows.OnSubmitted(rowsFile)
		s.steps.SetText("6")
		s.heldout.SetText("0.3")
		test.Tap(s.start)
	})
	eventually(t, u, "the rows summary", func() bool { return strings.Contains(s.rowsInfo.Text, "36 rows") })
	eventually(t, u, "training to end and the model to open", func() bool { return s.job == nil && s.sess != nil })
	if s.loss.points("train loss") == 0 || s.acc.points("color") < 2 || s.acc.points("ok") < 2 {
		t.Errorf("curves: loss %d, color %d, ok %d points", s.loss.points("train loss"), s.acc.points("color"), s.acc.points("ok"))
	}
	var labels []string
	locked(u, func() { labels = s.trained.Options })
	if len(labels) != 1 || !strings.Contains(labels[0], "colors on demo") {
		t.Errorf("trained models: %q", labels)
	}

	// Calibration: the diagram has both curves, the coverage table rows, and a
	// threshold chosen with the slider is saved to the folder.
	locked(u, func() {
		if s.question.Selected != "color" || !strings.Contains(s.calInfo.Text, "ECE") {
			t.Errorf("calibration: %q, %q", s.question.Selected, s.calInfo.Text)
		}
		if s.reliability.points("before calibration") == 0 || s.reliability.points("after calibration") == 0 {
			t.Error("the reliability diagram has no points")
		}
		if n := len(s.coverage.Objects); n < 3*3 {
			t.Errorf("coverage table: %d cells", n)
		}
		if !s.useThresh.Disabled() {
			t.Error("nothing to save before the slider moves")
		}
		s.slider.SetValue(0.8)
		s.slider.OnChanged(0.8)
		if s.useThresh.Disabled() || !strings.Contains(s.sliderInfo.Text, "At 0.80") {
			t.Errorf("after moving the slider: %q", s.sliderInfo.Text)
		}
		test.Tap(s.useThresh)
	})
	var cal struct {
		Questions map[string]struct{ Threshold float64 } `json:"questions"`
	}
	raw, err := os.ReadFile(filepath.Join(s.dir, "calibration.json"))
	if err != nil || json.Unmarshal(raw, &cal) != nil || cal.Questions["color"].Threshold != 0.8 {
		t.Errorf("saved threshold: %+v, %v", cal.Questions["color"], err)
	}

	// Try it.
	state := "my sea is here and fine"
	locked(u, func() {
		s.state.SetText(state)
		test.Tap(s.decide)
	})
	eventually(t, u, "the answers", func() bool { return len(s.answers.Objects) == 2 })
	var color app.Decision
	locked(u, func() {
		for _, d := range s.last {
			if d.Question == "color" {
				color = d
			}
		}
		_, right := findEntryAndButton(s.answers.Objects[0], "Right")
		if right == nil {
			t.Fatal("no Right button under an answer")
		}
		test.Tap(right)
	})
	eventually(t, u, "the confirmation", func() bool { return strings.HasPrefix(s.feedback.Text, "Confirmed") })
	v0 := s.sess.Version()
	wrong := "red"
	if color.Choice == "red" {
		wrong = "blue"
	}
	locked(u, func() { s.correct(state, "color", wrong) })
	eventually(t, u, "the correction", func() bool {
		return strings.HasPrefix(s.feedback.Text, "Retrained") || strings.HasPrefix(s.feedback.Text, "Rolled back")
	})
	if strings.HasPrefix(s.feedback.Text, "Retrained") {
		if s.sess.Version() == v0 || s.undo.Disabled() || len(s.version.Options) != 2 {
			t.Errorf("after a retrain: version %d (was %d), undo disabled %v, versions %q", s.sess.Version(), v0, s.undo.Disabled(), s.version.Options)
		}
		locked(u, func() { test.Tap(s.undo) })
		eventually(t, u, "the undo", func() bool { return strings.HasPrefix(s.feedback.Text, "Back to version") })
		if s.sess.Version() != v0 {
			t.Errorf("after undo: version %d, want %d", s.sess.Version(), v0)
		}
	} else {
		t.Logf("the correction was rolled back: %s", s.feedback.Text)
	}
}
