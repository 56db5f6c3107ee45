package decide

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Limits of a rows file.
const (
	MaxRowBytes = 1 << 20   // one line
	MaxRows     = 1_000_000 // rows kept from one file
	maxIssues   = 100       // issues listed; the rest are counted
)

// Row is one usable line of a rows file.
type Row struct {
	Line  int    // 1-based line number in its file
	State string // the text the model reads
	// Labels holds, per question of the task (in order), the index of the
	// answered option, or -1 where the row does not answer the question.
	Labels []int
}

// Answered reports whether the row answers question i.
func (r Row) Answered(i int) bool { return i < len(r.Labels) && r.Labels[i] >= 0 }

// Issue is a problem with one line of a rows file; the line is left out.
type Issue struct {
	Line    int
	Problem string
}

func (i Issue) Error() string { return fmt.Sprintf("line %d: %s", i.Line, i.Problem) }

// RowsReport is what ParseRows found: the rows kept, the lines left out with
// why (the first maxIssues; Omitted counts the rest).
type RowsReport struct {
	Rows    []Row
	Issues  []Issue
	Bad     int // lines left out
	Omitted int // issues not listed
}

// Err joins the listed issues, or is nil when every line was usable.
func (r *RowsReport) Err() error {
	if r.Bad == 0 {
		return nil
	}
	errs := make([]error, 0, len(r.Issues)+1)
	for _, is := range r.Issues {
		errs = append(errs, is)
	}
	if r.Omitted > 0 {
		errs = append(errs, fmt.Errorf("and %d more bad lines", r.Omitted))
	}
	return errors.Join(errs...)
}

func (r *RowsReport) issue(line int, format string, args ...any) {
	r.Bad++
	if len(r.Issues) >= maxIssues {
		r.Omitted++
		return
	}
	r.Issues = append(r.Issues, Issue{Line: line, Problem: fmt.Sprintf(format, args...)})
}

// ParseOptions adjusts ParseRows.
type ParseOptions struct {
	// RequireAnswers leaves out rows that answer no question (for training and
	// evaluation); prediction reads rows without answers.
	RequireAnswers bool
}

// ParseRows reads JSONL rows for task t:
//
//	{"state": "<text>" or {<object rendered as text>}, "answers": {"<question>": "<option>"}}
//
// A row may answer some questions only; a yes/no answer may be a JSON boolean;
// other fields are ignored. A line with an unknown question, an unknown option,
// an empty state or broken JSON is left out with an Issue naming its line, and
// the rest is kept. The error is for reading failures only.
func ParseRows(r io.Reader, t *Task, opt ParseOptions) (*RowsReport, error) {
	rep := &RowsReport{}
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		raw, tooLong, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return rep, fmt.Errorf("decide: rows: line %d: %w", line, err)
		}
		if len(raw) == 0 && errors.Is(err, io.EOF) && !tooLong {
			break
		}
		switch {
		case tooLong:
			rep.issue(line, "longer than %d bytes", MaxRowBytes)
		case len(bytes.TrimSpace(raw)) == 0:
			// blank lines are allowed
		case len(rep.Rows) >= MaxRows:
			rep.issue(line, "more than %d rows; the rest of the file is ignored", MaxRows)
			return rep, nil
		default:
			row, problem := parseRow(raw, t, opt)
			if problem != "" {
				rep.issue(line, "%s", problem)
			} else {
				row.Line = line
				rep.Rows = append(rep.Rows, row)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	return rep, nil
}

// readLine reads one line without its newline; a line over MaxRowBytes is
// consumed and reported as too long.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxRowBytes+2 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > MaxRowBytes {
			tooLong, line = true, nil
		}
		return line, tooLong, err
	}
}

func parseRow(raw []byte, t *Task, opt ParseOptions) (Row, string) {
	var obj struct {
		State   json.RawMessage            `json:"state"`
		Answers map[string]json.RawMessage `json:"answers"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Row{}, "not a JSON object with state and answers: " + err.Error()
	}
	if len(obj.State) == 0 || string(obj.State) == "null" {
		return Row{}, `no "state"`
	}
	state, err := RenderState(obj.State)
	if err != nil {
		return Row{}, err.Error()
	}
	if strings.TrimSpace(state) == "" {
		return Row{}, "empty state"
	}
	row := Row{State: state, Labels: make([]int, len(t.Questions))}
	for i := range row.Labels {
		row.Labels[i] = -1
	}
	names := make([]string, 0, len(obj.Answers))
	for name := range obj.Answers {
		names = append(names, name)
	}
	slices.Sort(names) // the first problem reported is the same every time
	for _, name := range names {
		q, qi := t.Question(name)
		if q == nil {
			return Row{}, fmt.Sprintf("unknown question %q (the task has %s)", name, questionList(t))
		}
		answer, ok := answerText(obj.Answers[name], q.Type)
		if !ok {
			return Row{}, fmt.Sprintf("question %q: the answer must be a string naming an option, got %s", name, clip(string(obj.Answers[name]), 60))
		}
		k := q.OptionIndex(answer)
		if k < 0 {
			return Row{}, fmt.Sprintf("question %q: unknown option %q (options: %s)", name, clip(answer, 60), clip(strings.Join(q.OptionNames(), ", "), 300))
		}
		row.Labels[qi] = k
	}
	if opt.RequireAnswers && len(names) == 0 {
		return Row{}, `no "answers"`
	}
	return row, ""
}

// answerText reads an answer: a string, or for a yes/no question a boolean.
func answerText(raw json.RawMessage, typ QuestionType) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var b bool
	if typ == YesNo && json.Unmarshal(raw, &b) == nil {
		if b {
			return "yes", true
		}
		return "no", true
	}
	return "", false
}

func questionList(t *Task) string {
	names := make([]string, len(t.Questions))
	for i, q := range t.Questions {
		names[i] = q.Name
	}
	return clip(strings.Join(names, ", "), 300)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// RenderState turns a row's state into the text the model reads: a JSON string
// as it is; a JSON object as one "key: value" line per field, in the file's
// order, string values as they are and other values as compact JSON.
func RenderState(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New(`no "state"`)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("state: %w", err)
		}
		return strings.TrimSpace(s), nil
	case '{':
	default:
		return "", errors.New("state must be text or a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if _, err := d.Token(); err != nil { // {
		return "", fmt.Errorf("state: %w", err)
	}
	var b strings.Builder
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return "", fmt.Errorf("state: %w", err)
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return "", fmt.Errorf("state: field %q: %w", key, err)
		}
		var text string
		if json.Unmarshal(v, &text) != nil {
			var c bytes.Buffer
			if err := json.Compact(&c, v); err != nil {
				return "", fmt.Errorf("state: field %q: %w", key, err)
			}
			text = c.String()
		}
		if strings.TrimSpace(text) == "" || text == "null" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(key)
		b.WriteString(": ")
		b.WriteString(strings.TrimSpace(text))
	}
	return b.String(), nil
}
