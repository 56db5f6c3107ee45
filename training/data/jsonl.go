package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/inloop/inloop/internal/capped"
)

// Record is one parsed JSONL row, before tokenization.
type Record struct {
	Line       int
	Format     Format
	Text       string    // FormatText
	Prompt     string    // FormatCompletion; may be empty
	Completion string    // FormatCompletion
	Messages   []Message // FormatChat; the last one is the assistant's
}

// Limits cap what a JSONL file may cost to read.
type Limits struct {
	MaxLineBytes int   // longer rows are dropped and reported; default 8 MiB
	MaxFileBytes int64 // larger files are refused; default 4 GiB
	MaxIssues    int   // issues and warnings listed per file; default 100
}

func (l Limits) withDefaults() Limits {
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = 8 << 20
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = 4 << 30
	}
	if l.MaxIssues <= 0 {
		l.MaxIssues = 100
	}
	return l
}

// roles a chat row may use.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// rowParser decides a file's format from its first valid row and holds later
// rows to it.
type rowParser struct {
	format    Format
	decidedBy int
	ignored   string // the last row's fields of other formats, for a warning
}

// parse turns one non-blank line into a Record, or says what is wrong with
// it (problem); warning is a caveat about a row that is kept.
func (p *rowParser) parse(line []byte, n int) (rec Record, problem, warning string) {
	rec, problem = p.parseRow(line, n)
	if problem != "" {
		return Record{}, problem, ""
	}
	return rec, "", p.ignored
}

func (p *rowParser) parseRow(line []byte, n int) (Record, string) {
	p.ignored = ""
	if !utf8.Valid(line) {
		return Record{}, "invalid UTF-8"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		if json.Valid(line) {
			return Record{}, "want a JSON object, got " + kind(line)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Record{}, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
		}
		return Record{}, "invalid JSON: " + err.Error()
	}
	if obj == nil { // the line was `null`
		return Record{}, "want a JSON object, got null"
	}
	seen := detect(obj)
	if p.format == FormatUnknown {
		if seen == FormatUnknown {
			return Record{}, `no "text", "prompt"/"completion" or "messages" field`
		}
		rec, problem := recordOf(obj, seen)
		if problem == "" {
			p.format, p.decidedBy = seen, n
			if other := otherFields(obj, seen); other != "" {
				p.ignored = fmt.Sprintf("%s ignored: the row is read as %s", other, seen)
			}
		}
		rec.Line = n
		return rec, problem
	}
	if !hasFields(obj, p.format) && seen != FormatUnknown {
		return Record{}, fmt.Sprintf("row is %s but the file is %s (decided by line %d)", seen, p.format, p.decidedBy)
	}
	rec, problem := recordOf(obj, p.format)
	rec.Line = n
	if other := otherFields(obj, p.format); other != "" && problem == "" {
		p.ignored = fmt.Sprintf("%s ignored: the file is %s (decided by line %d)", other, p.format, p.decidedBy)
	}
	return rec, problem
}

// otherFields names the fields of formats other than f that obj carries,
// which reading it as f leaves out.
func otherFields(obj map[string]json.RawMessage, f Format) string {
	var names []string
	for _, o := range []Format{FormatText, FormatCompletion, FormatChat} {
		if o != f && hasFields(obj, o) {
			names = append(names, formatFields[o])
		}
	}
	return strings.Join(names, " and ")
}

// formatFields names each format's fields in warnings.
var formatFields = map[Format]string{FormatText: `"text"`, FormatCompletion: `"prompt"/"completion"`, FormatChat: `"messages"`}

// detect names the format a row looks like, in mlx-lm's order of precedence.
func detect(obj map[string]json.RawMessage) Format {
	for _, f := range []Format{FormatChat, FormatCompletion, FormatText} {
		if hasFields(obj, f) {
			return f
		}
	}
	return FormatUnknown
}

func hasFields(obj map[string]json.RawMessage, f Format) bool {
	has := func(k string) bool { _, ok := obj[k]; return ok }
	switch f {
	case FormatText:
		return has("text")
	case FormatCompletion:
		return has("prompt") || has("completion")
	case FormatChat:
		return has("messages")
	}
	return false
}

func recordOf(obj map[string]json.RawMessage, f Format) (Record, string) {
	rec := Record{Format: f}
	var problem string
	switch f {
	case FormatText:
		if rec.Text, problem = str(obj, "text", "text"); problem == "" && strings.TrimSpace(rec.Text) == "" {
			problem = `empty "text"`
		}
	case FormatCompletion:
		if rec.Prompt, problem = str(obj, "prompt", "prompt"); problem != "" {
			break
		}
		if rec.Completion, problem = str(obj, "completion", "completion"); problem == "" && strings.TrimSpace(rec.Completion) == "" {
			problem = `empty "completion"`
		}
	case FormatChat:
		rec.Messages, problem = messages(obj["messages"])
	}
	return rec, problem
}

func messages(raw json.RawMessage) ([]Message, string) {
	if raw == nil {
		return nil, `missing field "messages"`
	}
	var items []json.RawMessage
	if k := kind(raw); k != "array" {
		return nil, `field "messages": want array, got ` + k
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, `field "messages": ` + err.Error()
	}
	if len(items) == 0 {
		return nil, `empty "messages"`
	}
	msgs := make([]Message, len(items))
	for i, it := range items {
		where := fmt.Sprintf("messages[%d]", i)
		var obj map[string]json.RawMessage
		if k := kind(it); k != "object" {
			return nil, where + ": want object, got " + k
		}
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, where + ": " + err.Error()
		}
		var problem string
		if msgs[i].Role, problem = str(obj, "role", where+".role"); problem != "" {
			return nil, problem
		}
		if !roles[msgs[i].Role] {
			return nil, fmt.Sprintf("%s: unknown role %q (want system, developer, user, assistant or tool)", where, msgs[i].Role)
		}
		if msgs[i].Content, problem = str(obj, "content", where+".content"); problem != "" {
			return nil, problem
		}
	}
	last := msgs[len(msgs)-1]
	if last.Role != "assistant" {
		return nil, fmt.Sprintf("last message is %q; want \"assistant\" (its reply is what is learned)", last.Role)
	}
	if strings.TrimSpace(last.Content) == "" {
		return nil, "empty content in the last assistant message"
	}
	return msgs, ""
}

// str reads a string field; where names it in the problem.
func str(obj map[string]json.RawMessage, key, where string) (string, string) {
	raw, ok := obj[key]
	if !ok {
		return "", fmt.Sprintf("missing field %q", where)
	}
	var s string
	if k := kind(raw); k != "string" {
		return "", fmt.Sprintf("field %q: want string, got %s", where, k)
	}
	if esc, at, ok := loneSurrogate(raw); ok {
		return "", fmt.Sprintf("field %q: lone UTF-16 surrogate %s at byte %d of the value, which is not text (encoding/json would read it as U+FFFD)", where, esc, at)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Sprintf("field %q: %v", where, err)
	}
	return s, ""
}

// loneSurrogate finds the first \u escape in a JSON string that is half of a
// UTF-16 surrogate pair without its other half, and returns it as written
// and its byte offset in raw.
func loneSurrogate(raw []byte) (string, int, bool) {
	if !bytes.Contains(raw, []byte(`\u`)) {
		return "", 0, false
	}
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		switch {
		case !ok:
			i++ // another escape: skip the escaped byte (it may be a backslash)
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := hex4(i + 6); ok && lo >= 0xdc00 && lo < 0xe000 {
				i += 11
				continue
			}
			return string(raw[i : i+6]), i, true
		case r >= 0xdc00 && r < 0xe000:
			return string(raw[i : i+6]), i, true
		default:
			i += 5
		}
	}
	return "", 0, false
}

// kind names a JSON value's type from its first byte.
func kind(raw []byte) string {
	s := strings.TrimLeft(string(raw[:min(len(raw), 64)]), " \t\r\n")
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// Options say how rows become examples.
type Options struct {
	Tokenizer Tokenizer // required
	// Renderer applies the chat template. Chat files need it. When set,
	// prompt/completion rows are rendered as a user turn and an assistant turn
	// (as mlx-lm does); when nil they are joined as plain text.
	Renderer Renderer
	// AppendEOS puts EOS after text and plain prompt/completion examples that
	// do not already end with it, so the model learns to stop. Chat templates
	// close their turns themselves.
	AppendEOS bool
	EOS       int
	Limits
}

// Set is the examples of one JSONL file.
type Set struct {
	Path     string
	Format   Format
	Examples []Example
}

// ReadJSONL reads one JSONL file's rows from r; name is the file named in
// issues. Bad rows are listed in the report and the rest are kept; the error
// is for failures that stop reading (I/O, a size cap) and ErrNoExamples.
func ReadJSONL(r io.Reader, name string, opt Options) (*Set, *Report, error) {
	rep := &Report{}
	set, err := readJSONL(r, name, opt, rep)
	return set, rep, err
}

func readJSONL(r io.Reader, name string, opt Options, rep *Report) (*Set, error) {
	if opt.Tokenizer == nil {
		return nil, errors.New("data: Options.Tokenizer is nil")
	}
	opt.Limits = opt.Limits.withDefaults()
	log := rep.file(name, opt.MaxIssues)
	lr := newLineReader(capped.NewReader(r, opt.MaxFileBytes, name), opt.MaxLineBytes)
	set := &Set{Path: name}
	var p rowParser
	first := true
	for {
		line, long, err := lr.next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, capped.ErrTooLarge) {
			return nil, withTooLarge(err)
		}
		if err != nil {
			return nil, fmt.Errorf("data: %s: line %d: %w", name, lr.n+1, err)
		}
		if long {
			log.stats().Rows++
			log.bad(lr.n, fmt.Sprintf("line longer than %d bytes", opt.MaxLineBytes))
			continue
		}
		trimmed := bytes.TrimLeft(line, " \t\r\n")
		if len(trimmed) == 0 {
			continue
		}
		if first && trimmed[0] == '[' {
			// Many tools export a dataset as one JSON array. Read as lines
			// it is all bad rows, except that a pretty-printed array's last
			// element, alone on its line, would pass as one good row.
			return set, fmt.Errorf("%w in %s: %w", ErrNoExamples, name, ErrJSONArray)
		}
		first = false
		log.stats().Rows++
		rec, problem, caveat := p.parse(line, lr.n)
		if problem != "" {
			log.bad(lr.n, problem)
			continue
		}
		ex, warning, err := Encode(rec, opt)
		if err != nil {
			log.bad(lr.n, err.Error())
			continue
		}
		if caveat != "" && warning != "" {
			warning = caveat + "; " + warning
		} else if caveat != "" {
			warning = caveat
		}
		if warning != "" {
			log.warn(lr.n, warning)
		}
		ex.Source = fmt.Sprintf("%s:%d", name, rec.Line)
		set.Examples = append(set.Examples, ex)
	}
	set.Format = p.format
	log.stats().Format = p.format
	log.stats().Examples = len(set.Examples)
	if len(set.Examples) == 0 {
		return set, fmt.Errorf("%w in %s", ErrNoExamples, name)
	}
	return set, nil
}

// LoadJSONL reads one JSONL file. See ReadJSONL.
func LoadJSONL(path string, opt Options) (*Set, *Report, error) {
	rep := &Report{}
	set, err := loadJSONL(path, opt, rep)
	return set, rep, err
}

func loadJSONL(path string, opt Options, rep *Report) (*Set, error) {
	f, err := capped.Open(path, opt.Limits.withDefaults().MaxFileBytes) // refuses a file over the cap before reading a line
	if errors.Is(err, capped.ErrTooLarge) {
		return nil, withTooLarge(err)
	}
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	return readJSONL(f, path, opt, rep)
}

// Splits are the files of an mlx-lm data folder; a file that is absent leaves
// its split nil.
type Splits struct {
	Train, Valid, Test *Set
}

// LoadSplits reads train.jsonl, valid.jsonl and test.jsonl from dir, each with
// its own format. A split whose file is absent stays nil; at least one must
// exist. One report covers all files.
func LoadSplits(dir string, opt Options) (*Splits, *Report, error) {
	rep := &Report{}
	var s Splits
	found := 0
	for _, sp := range []struct {
		name string
		set  **Set
	}{{"train", &s.Train}, {"valid", &s.Valid}, {"test", &s.Test}} {
		path := filepath.Join(dir, sp.name+".jsonl")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found++
		set, err := loadJSONL(path, opt, rep)
		if err != nil {
			return nil, rep, err
		}
		*sp.set = set
	}
	if found == 0 {
		return nil, rep, fmt.Errorf("data: %s has no train.jsonl, valid.jsonl or test.jsonl", dir)
	}
	return &s, rep, nil
}

// IsSplitDir reports whether dir is an mlx-lm data folder rather than a folder
// of documents.
func IsSplitDir(dir string) bool {
	for _, n := range []string{"train", "valid", "test"} {
		if info, err := os.Stat(filepath.Join(dir, n+".jsonl")); err == nil && info.Mode().IsRegular() {
			return true
		}
	}
	return false
}
