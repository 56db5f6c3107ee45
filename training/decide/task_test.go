package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/inloop/inloop/resources"
)

const smallTask = `{
  "name": "colors",
  "instruction": "Sort.",
  "questions": [
    {"name": "color", "type": "choice", "instruction": "Color?", "prompt": "C",
     "options": ["red", {"name": "green", "description": "leaf"}, "blue"]},
    {"name": "ok", "type": "yesno", "instruction": "Fine?", "prompt": "F"}
  ]
}`

func mustTask(t testing.TB, s string) *Task {
	t.Helper()
	task, err := ParseTask([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestParseTask(t *testing.T) {
	task := mustTask(t, smallTask)
	if got := task.Questions[1].OptionNames(); strings.Join(got, ",") != "yes,no" {
		t.Errorf("yesno options %v, want yes,no", got)
	}
	if task.Questions[0].Options[1].Description != "leaf" || task.Questions[0].Prompt != "C" {
		t.Errorf("options %+v", task.Questions[0])
	}
	if task.StateLabel != "Input" {
		t.Errorf("state label %q, want the default Input", task.StateLabel)
	}
	bad := map[string]string{
		"not json":            `{"name": `,
		"unknown field":       `{"name": "x", "questionz": []}`,
		"no name":             `{"questions": [{"name": "q", "type": "yesno", "instruction": "i"}]}`,
		"no questions":        `{"name": "x", "questions": []}`,
		"bad question name":   `{"name": "x", "questions": [{"name": "a b", "type": "yesno", "instruction": "i"}]}`,
		"duplicate question":  `{"name": "x", "questions": [{"name": "q", "type": "yesno", "instruction": "i"}, {"name": "q", "type": "yesno", "instruction": "i"}]}`,
		"no instruction":      `{"name": "x", "questions": [{"name": "q", "type": "yesno"}]}`,
		"unknown type":        `{"name": "x", "questions": [{"name": "q", "type": "multi", "instruction": "i", "options": ["a", "b"]}]}`,
		"no type":             `{"name": "x", "questions": [{"name": "q", "instruction": "i", "options": ["a", "b"]}]}`,
		"one option":          `{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": ["a"]}]}`,
		"duplicate option":    `{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": ["a", "A"]}]}`,
		"empty option":        `{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": ["a", " "]}]}`,
		"yesno other options": `{"name": "x", "questions": [{"name": "q", "type": "yesno", "instruction": "i", "options": ["y", "n"]}]}`,
		"option field typo":   `{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": [{"nam": "a"}, "b"]}]}`,
		"trailing text":       `{"name": "x", "questions": [{"name": "q", "type": "yesno", "instruction": "i"}]} {}`,
		"multi-line prompt":   `{"name": "x", "questions": [{"name": "q", "type": "yesno", "instruction": "i", "prompt": "a\nb"}]}`,
	}
	for name, s := range bad {
		if _, err := ParseTask([]byte(s)); !errors.Is(err, ErrTask) {
			t.Errorf("%s: error %v, want ErrTask", name, err)
		}
	}
	many := `{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": [` + strings.Repeat(`"o",`, 256) + `"o"]}]}`
	if _, err := ParseTask([]byte(many)); err == nil {
		t.Error("257 options: no error")
	}
}

func TestSampleTaskParses(t *testing.T) {
	taskJSON, rowsJSONL := resources.TicketsTask()
	task, err := ParseTask(taskJSON)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseRows(bytes.NewReader(rowsJSONL), task, ParseOptions{RequireAnswers: true})
	if err != nil || rep.Bad != 0 {
		t.Fatalf("sample rows: %v, %v", err, rep.Err())
	}
	if len(rep.Rows) < 1000 {
		t.Errorf("%d sample rows, want at least 1000", len(rep.Rows))
	}
}

func TestParseRowsKeepsGoodLines(t *testing.T) {
	task := mustTask(t, smallTask)
	input := strings.Join([]string{
		`{"state": "a red car", "answers": {"color": "red", "ok": "yes"}}`,
		`{"state": "x", "answers": {"colour": "red"}}`,
		`{"state": "x", "answers": {"color": "purple"}}`,
		`{"state": "  ", "answers": {"color": "red"}}`,
		``,
		`{"state": {"subject": "Hi", "body": "green grass", "n": 3, "tags": ["a", "b"], "none": null}, "answers": {"color": " Green "}}`,
		`not json`,
		`{"state": 7, "answers": {"color": "red"}}`,
		`{"state": "fine", "answers": {"ok": true}}`,
		`{"state": "no answers"}`,
		`{"state": "x", "answers": {"color": 3}}`,
		`{"answers": {"color": "red"}}`,
	}, "\n")
	rep, err := ParseRows(strings.NewReader(input), task, ParseOptions{RequireAnswers: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("kept %d rows, want 3: %+v", len(rep.Rows), rep.Rows)
	}
	if r := rep.Rows[1]; r.Line != 6 || r.State != "subject: Hi\nbody: green grass\nn: 3\ntags: [\"a\",\"b\"]" || r.Labels[0] != 1 || r.Labels[1] != -1 {
		t.Errorf("row from line 6 = %+v", r)
	}
	if r := rep.Rows[2]; r.Labels[1] != 0 || r.Labels[0] != -1 {
		t.Errorf("boolean yes: %+v", r)
	}
	wantLines := []int{2, 3, 4, 7, 8, 10, 11, 12}
	if len(rep.Issues) != len(wantLines) || rep.Bad != len(wantLines) {
		t.Fatalf("issues %v, want lines %v", rep.Issues, wantLines)
	}
	for i, is := range rep.Issues {
		if is.Line != wantLines[i] {
			t.Errorf("issue %d on line %d, want %d (%s)", i, is.Line, wantLines[i], is.Problem)
		}
	}
	for want, line := range map[string]int{`unknown question "colour"`: 2, `unknown option "purple"`: 3, "empty state": 4, "no \"answers\"": 10} {
		found := false
		for _, is := range rep.Issues {
			found = found || is.Line == line && strings.Contains(is.Problem, want)
		}
		if !found {
			t.Errorf("no issue %q on line %d: %v", want, line, rep.Issues)
		}
	}
	if rep.Err() == nil || !strings.Contains(rep.Err().Error(), "line 3:") {
		t.Errorf("Err() = %v", rep.Err())
	}
	// Prediction reads rows without answers.
	rep, _ = ParseRows(strings.NewReader(`{"state": "no answers"}`), task, ParseOptions{})
	if len(rep.Rows) != 1 || rep.Bad != 0 {
		t.Errorf("a row without answers for prediction: %+v", rep)
	}
}

func TestParseRowsLongLine(t *testing.T) {
	task := mustTask(t, smallTask)
	long := `{"state": "` + strings.Repeat("a", MaxRowBytes) + `", "answers": {"color": "red"}}`
	input := `{"state": "a", "answers": {"color": "red"}}` + "\n" + long + "\n" + `{"state": "b", "answers": {"color": "blue"}}`
	rep, err := ParseRows(strings.NewReader(input), task, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[1].Line != 3 || len(rep.Issues) != 1 || rep.Issues[0].Line != 2 {
		t.Errorf("rows %+v issues %v, want lines 1 and 3 kept and line 2 too long", rep.Rows, rep.Issues)
	}
}

func FuzzParseRows(f *testing.F) {
	_, rows := resources.TicketsTask()
	for _, line := range bytes.SplitN(rows, []byte("\n"), 6)[:5] {
		f.Add(line)
	}
	f.Add([]byte(`{"state": {"a": {"b": [1, 2]}, "c": "d"}, "answers": {"color": "red", "ok": false}}`))
	f.Add([]byte("{\"state\": \"x\"}\n\n\r\n{\"state\": \"\xff\"}"))
	f.Add([]byte(`{"state": "x", "answers": {"color": null}}`))
	task := mustTask(f, smallTask)
	tickets, _ := resources.TicketsTask()
	ticketTask := mustTask(f, string(tickets))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tk := range []*Task{task, ticketTask} {
			rep, err := ParseRows(bytes.NewReader(data), tk, ParseOptions{RequireAnswers: true})
			if err != nil {
				t.Fatal(err) // a bytes.Reader never fails
			}
			lines := bytes.Count(data, []byte("\n")) + 1
			if len(rep.Rows)+rep.Bad > lines {
				t.Fatalf("%d rows and %d bad lines from %d lines", len(rep.Rows), rep.Bad, lines)
			}
			for _, r := range rep.Rows {
				if strings.TrimSpace(r.State) == "" || r.Line < 1 || r.Line > lines || len(r.Labels) != len(tk.Questions) {
					t.Fatalf("bad row kept: %+v", r)
				}
				answered := false
				for q, l := range r.Labels {
					if l < -1 || l >= len(tk.Questions[q].Options) {
						t.Fatalf("label %d of question %d out of range", l, q)
					}
					answered = answered || l >= 0
				}
				if !answered {
					t.Fatalf("row without answers kept: %+v", r)
				}
			}
			for _, is := range rep.Issues {
				if is.Line < 1 || is.Line > lines || is.Problem == "" {
					t.Fatalf("issue %+v", is)
				}
			}
		}
	})
}

func FuzzParseTask(f *testing.F) {
	tickets, _ := resources.TicketsTask()
	f.Add(tickets)
	f.Add([]byte(smallTask))
	f.Add([]byte(`{"name": "x", "questions": [{"name": "q", "type": "choice", "instruction": "i", "options": ["a", {"name": "b"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := ParseTask(data)
		if err != nil {
			if !errors.Is(err, ErrTask) {
				t.Fatalf("error %v does not wrap ErrTask", err)
			}
			return
		}
		// A parsed task is valid and survives its own round trip.
		for _, q := range task.Questions {
			if len(q.Options) < 2 || len(q.Options) > MaxOptions || q.Prompt == "" {
				t.Fatalf("question %+v", q)
			}
		}
		again, err := task.JSON()
		if err != nil {
			t.Fatal(err)
		}
		task2, err := ParseTask(again)
		if err != nil {
			t.Fatalf("a normalized task does not parse again: %v\n%s", err, again)
		}
		a, _ := json.Marshal(task)
		b, _ := json.Marshal(task2)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the task:\n%s\n%s", a, b)
		}
	})
}
