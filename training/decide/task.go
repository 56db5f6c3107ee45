// Package decide turns a language model into a decision model: for a task of
// typed questions (pick one of a few named options, or yes/no), it scores every
// option of a question in one forward pass, trains a small head and a LoRA
// adapter on labelled rows, and answers with probabilities calibrated on a
// held-out split (training/calibrate), so an application can act on a confident
// answer and escalate the rest to a person.
//
// The sequence for one question of one row is
//
//	[task instruction] question instruction, the options listed, the state, "Prompt:"   ← query position q
//	" option₁" <marker>  " option₂" <marker>  …                                          ← marker positions m_k
//
// and the head scores option k from the final hidden states h (after the norm):
//
//	s_k = h_q·r_k + h_{m_k}·v + mean(h_state)·u_k + b_k
//
// r_k starts as the output-projection row of option k's first token and v, u, b
// as zeros, so an untrained model answers exactly as restricted decoding would
// (the next-token logits at q, restricted to the options' first tokens);
// training then moves the head and the adapter. The options come after q, so q
// sees the prompt alone. The questions of a row are separate sequences of one
// batch.
//
// The pooled term is there because a small backbone does not carry a long
// state's content to the last positions: on the bundled demo model a linear
// probe reads the ticket's team from mean(h_state) at 74% but from h_q or the
// markers at chance (26%, 35%). Attention learnt by the adapter closes the gap
// on larger models; the pooled term lets the head use the content from the
// first step.
package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// QuestionType is what kind of answer a question takes.
type QuestionType string

const (
	Choice QuestionType = "choice" // one of 2–255 named options
	YesNo  QuestionType = "yesno"  // the options "yes" and "no"
)

// Limits of a task file.
const (
	MaxTaskBytes     = 1 << 20
	MaxQuestions     = 64
	MaxOptions       = 255
	maxOptionNameLen = 200
	maxTextLen       = 16 << 10 // an instruction, prompt or description
)

// ErrTask is wrapped by every error about a task file's content.
var ErrTask = errors.New("decide: task")

// Option is one answer a question can take. In a task file an option is its
// name as a string, or an object with a name and a description the prompt shows.
type Option struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

func (o *Option) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		*o = Option{}
		return json.Unmarshal(b, &o.Name)
	}
	type plain Option
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var p plain
	if err := d.Decode(&p); err != nil {
		return err
	}
	*o = Option(p)
	return nil
}

// Question is one decision of a task.
type Question struct {
	Name        string       `json:"name"` // letters, digits, _ and -; the key in a row's answers
	Type        QuestionType `json:"type"`
	Instruction string       `json:"instruction"`
	// Prompt is the cue the answer follows, "Team" in "…\n\nTeam:"; default "Answer".
	Prompt  string   `json:"prompt,omitempty"`
	Options []Option `json:"options,omitempty"` // a yesno question's are yes and no
}

// OptionIndex returns the index of the option a row's answer names (exactly, or
// ignoring case and surrounding space), or -1.
func (q *Question) OptionIndex(answer string) int {
	for i, o := range q.Options {
		if o.Name == answer {
			return i
		}
	}
	a := strings.TrimSpace(answer)
	for i, o := range q.Options {
		if strings.EqualFold(o.Name, a) {
			return i
		}
	}
	return -1
}

// OptionNames lists the question's option names in order.
func (q *Question) OptionNames() []string {
	out := make([]string, len(q.Options))
	for i, o := range q.Options {
		out[i] = o.Name
	}
	return out
}

// Task is a set of questions asked about each state (a ticket, a request).
type Task struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Instruction opens every question's prompt: who is deciding, about what.
	Instruction string `json:"instruction,omitempty"`
	// StateLabel names the state in the prompt ("Ticket"); default "Input".
	StateLabel string     `json:"state_label,omitempty"`
	Questions  []Question `json:"questions"`
}

// Question returns the question named name and its index, or nil and -1.
func (t *Task) Question(name string) (*Question, int) {
	for i := range t.Questions {
		if t.Questions[i].Name == name {
			return &t.Questions[i], i
		}
	}
	return nil, -1
}

var questionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseTask reads a task file (JSON, at most MaxTaskBytes), fills the defaults
// (yes/no options, the prompt) and checks it. Unknown fields are refused, so a
// misspelt key is an error rather than a silently missing setting.
func ParseTask(data []byte) (*Task, error) {
	if len(data) > MaxTaskBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a task file may have", ErrTask, len(data), MaxTaskBytes)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var t Task
	if err := d.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTask, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: text after the task's JSON object", ErrTask)
	}
	if err := t.normalize(); err != nil {
		return nil, err
	}
	return &t, nil
}

// normalize fills defaults and validates.
func (t *Task) normalize() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrTask, fmt.Sprintf(format, args...))
	}
	t.Name = strings.TrimSpace(t.Name)
	if t.Name == "" {
		return bad("no name")
	}
	if t.StateLabel == "" {
		t.StateLabel = "Input"
	}
	if len(t.Instruction) > maxTextLen || len(t.Description) > maxTextLen || len(t.StateLabel) > 100 {
		return bad("the instruction, description or state label is too long")
	}
	if len(t.Questions) == 0 || len(t.Questions) > MaxQuestions {
		return bad("%d questions, want 1 to %d", len(t.Questions), MaxQuestions)
	}
	seen := map[string]bool{}
	for i := range t.Questions {
		q := &t.Questions[i]
		if !questionName.MatchString(q.Name) {
			return bad("question %d: name %q must be 1–64 letters, digits, _ or -", i+1, q.Name)
		}
		if seen[q.Name] {
			return bad("question %q appears twice", q.Name)
		}
		seen[q.Name] = true
		if strings.TrimSpace(q.Instruction) == "" {
			return bad("question %q has no instruction", q.Name)
		}
		if q.Prompt == "" {
			q.Prompt = "Answer"
		}
		if len(q.Instruction) > maxTextLen || len(q.Prompt) > 200 || strings.ContainsAny(q.Prompt, "\n\r") {
			return bad("question %q: the instruction or prompt is too long, or the prompt spans lines", q.Name)
		}
		switch q.Type {
		case YesNo:
			if len(q.Options) == 0 {
				q.Options = []Option{{Name: "yes"}, {Name: "no"}}
			}
			if len(q.Options) != 2 || q.OptionIndex("yes") < 0 || q.OptionIndex("no") < 0 {
				return bad("question %q is yesno: its options, when given, must be yes and no", q.Name)
			}
		case Choice:
			if len(q.Options) < 2 || len(q.Options) > MaxOptions {
				return bad("question %q has %d options, want 2 to %d", q.Name, len(q.Options), MaxOptions)
			}
		case "":
			return bad("question %q has no type (choice or yesno)", q.Name)
		default:
			return bad("question %q: type %q (choice or yesno)", q.Name, q.Type)
		}
		names := map[string]bool{}
		for j := range q.Options {
			o := &q.Options[j]
			o.Name = strings.TrimSpace(o.Name)
			key := strings.ToLower(o.Name)
			switch {
			case o.Name == "":
				return bad("question %q: option %d has no name", q.Name, j+1)
			case len(o.Name) > maxOptionNameLen || strings.ContainsAny(o.Name, "\n\r"):
				return bad("question %q: option %q is too long or spans lines", q.Name, o.Name)
			case len(o.Description) > maxTextLen:
				return bad("question %q: option %q has a description over %d bytes", q.Name, o.Name, maxTextLen)
			case names[key]:
				return bad("question %q: option %q appears twice (names are compared ignoring case)", q.Name, o.Name)
			}
			names[key] = true
		}
	}
	return nil
}

// JSON is the task file t came from, normalized.
func (t *Task) JSON() ([]byte, error) { return json.MarshalIndent(t, "", "  ") }
