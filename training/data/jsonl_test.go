package data

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func textOptions() Options {
	return Options{Tokenizer: &byteTokenizer{}, AppendEOS: true, EOS: testEOS}
}

func chatOptions() Options {
	o := textOptions()
	o.Renderer = tagTemplate{}
	return o
}

func TestFormatsAndMasks(t *testing.T) {
	tests := []struct {
		name        string
		opt         Options
		line        string
		format      Format
		tokens      string // decoded
		learned     string // decoded tokens under the mask
		wantWarning bool
	}{
		{"text", textOptions(), `{"text": "hi"}`, FormatText, "<s>hi</s>", "<s>hi</s>", false},
		{"text ending in EOS gets no second", Options{Tokenizer: &byteTokenizer{}, AppendEOS: true, EOS: 'i'}, `{"text": "hi"}`, FormatText, "<s>hi", "<s>hi", false},
		{"completion, plain", textOptions(), `{"prompt": "Q: 2+2? A:", "completion": " 4"}`, FormatCompletion,
			"<s>Q: 2+2? A: 4</s>", " 4</s>", false},
		{"completion, empty prompt", textOptions(), `{"prompt": "", "completion": "go"}`, FormatCompletion, "<s>go</s>", "go</s>", false},
		{"completion, chat template", chatOptions(), `{"prompt": "Q", "completion": "A"}`, FormatCompletion,
			"<user>Q</s>\n<assistant>A</s>\n", "A</s>\n", false},
		{"chat, one turn", chatOptions(), `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}`, FormatChat,
			"<user>hi</s>\n<assistant>yo</s>\n", "yo</s>\n", false},
		{"chat, only the last assistant turn is learned", chatOptions(),
			`{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}, {"role": "assistant", "content": "A2"}], "tools": []}`,
			FormatChat, "<system>S</s>\n<user>U1</s>\n<assistant>A1</s>\n<user>U2</s>\n<assistant>A2</s>\n", "A2</s>\n", false},
		{"chat, prompt not a prefix: common token prefix", Options{Tokenizer: &byteTokenizer{}, Renderer: thinkTemplate{}},
			`{"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]}`, FormatChat,
			"<user>U</s>\n<assistant>A</s>\n", "A</s>\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, rep, err := ReadJSONL(strings.NewReader(tt.line+"\n"), "f.jsonl", tt.opt)
			if err != nil {
				t.Fatalf("ReadJSONL: %v\n%s", err, rep)
			}
			if set.Format != tt.format {
				t.Errorf("format %v, want %v", set.Format, tt.format)
			}
			if len(set.Examples) != 1 {
				t.Fatalf("got %d examples, want 1", len(set.Examples))
			}
			ex := set.Examples[0]
			if got := decode(ex.Tokens); got != tt.tokens {
				t.Errorf("tokens %q, want %q", got, tt.tokens)
			}
			if got := learned(ex); got != tt.learned {
				t.Errorf("learned %q, want %q", got, tt.learned)
			}
			if ex.Source != "f.jsonl:1" {
				t.Errorf("source %q, want f.jsonl:1", ex.Source)
			}
			if got := len(rep.Warnings) > 0; got != tt.wantWarning {
				t.Errorf("warnings %v, want any: %v", rep.Warnings, tt.wantWarning)
			}
			if len(rep.Issues) != 0 {
				t.Errorf("issues %v, want none", rep.Issues)
			}
		})
	}
}

// The mask, written out token by token for a prompt/completion row.
func TestCompletionMaskByHand(t *testing.T) {
	set, _, err := ReadJSONL(strings.NewReader(`{"prompt":"ab","completion":"cd"}`), "f", textOptions())
	if err != nil {
		t.Fatal(err)
	}
	ex := set.Examples[0]
	wantTokens := []int32{testBOS, 'a', 'b', 'c', 'd', testEOS}
	wantMask := []bool{false, false, false, true, true, true}
	if !equal(ex.Tokens, wantTokens) || !equal(ex.Mask, wantMask) {
		t.Errorf("got %v %v, want %v %v", ex.Tokens, ex.Mask, wantTokens, wantMask)
	}
	if got := ex.Targets(); got != 3 {
		t.Errorf("Targets() = %d, want 3", got)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBadRowsReportedGoodRowsKept(t *testing.T) {
	file := strings.Join([]string{
		`{"text": "good one"}`,                // 1
		`not json`,                            // 2
		`{"text": 5}`,                         // 3
		`{"text": "  "}`,                      // 4
		`{"prompt": "a", "completion": "b"}`,  // 5
		`[1, 2]`,                              // 6
		``,                                    // 7: blank, skipped silently
		`{"foo": 1}`,                          // 8
		`{"text": "bad \u007f token"}`,        // 9: the tokenizer refuses it
		"{\"text\": \"\xff\"}",                // 10
		`null`,                                // 11
		`{"text": "good two", "extra": true}`, // 12
	}, "\n")
	set, rep, err := ReadJSONL(strings.NewReader(file), "mixed.jsonl", textOptions())
	if err != nil {
		t.Fatalf("ReadJSONL: %v", err)
	}
	var got []string
	for _, ex := range set.Examples {
		got = append(got, ex.Source)
	}
	if want := []string{"mixed.jsonl:1", "mixed.jsonl:12"}; !equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	want := []struct {
		line    int
		problem string
	}{
		{2, "invalid JSON"},
		{3, `field "text": want string, got number`},
		{4, `empty "text"`},
		{5, "row is prompt/completion but the file is text (decided by line 1)"},
		{6, "want a JSON object, got array"},
		{8, `missing field "text"`},
		{9, "tokenize: DEL is not in the vocabulary"},
		{10, "invalid UTF-8"},
		{11, "want a JSON object, got null"},
	}
	if len(rep.Issues) != len(want) {
		t.Fatalf("got %d issues, want %d:\n%s", len(rep.Issues), len(want), rep)
	}
	for i, w := range want {
		is := rep.Issues[i]
		if is.File != "mixed.jsonl" || is.Line != w.line || !strings.Contains(is.Problem, w.problem) {
			t.Errorf("issue %d: got %q, want line %d with %q", i, is.Error(), w.line, w.problem)
		}
	}
	st := rep.Files[0]
	if st.Rows != 11 || st.Examples != 2 || st.Bad != 9 || st.Format != FormatText {
		t.Errorf("stats %+v, want 11 rows, 2 examples, 9 bad, text", st)
	}
	if rep.Err() == nil || !strings.Contains(rep.Err().Error(), "mixed.jsonl:3: ") {
		t.Errorf("Err() = %v, want the issues joined", rep.Err())
	}
}

func TestBadChatRows(t *testing.T) {
	rows := []struct{ line, problem string }{
		{`{"messages": "hi"}`, `field "messages": want array, got string`},
		{`{"messages": []}`, `empty "messages"`},
		{`{"messages": [1]}`, "messages[0]: want object, got number"},
		{`{"messages": [{"content": "x"}]}`, `missing field "messages[0].role"`},
		{`{"messages": [{"role": "bot", "content": "x"}]}`, `messages[0]: unknown role "bot"`},
		{`{"messages": [{"role": "user", "content": ["x"]}]}`, `field "messages[0].content": want string, got array`},
		{`{"messages": [{"role": "assistant", "content": null}]}`, `want string, got null`},
		{`{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]}`, `last message is "user"`},
		{`{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": ""}]}`, "empty content in the last assistant message"},
	}
	lines := []string{`{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "ok"}]}`}
	for _, r := range rows {
		lines = append(lines, r.line)
	}
	lines = append(lines, `{"text": "not chat"}`, lines[0])
	set, rep, err := ReadJSONL(strings.NewReader(strings.Join(lines, "\n")), "chat.jsonl", chatOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Examples) != 2 || set.Examples[1].Source != "chat.jsonl:12" {
		t.Errorf("kept %d examples (last %q), want 2 ending at line 12", len(set.Examples), set.Examples[len(set.Examples)-1].Source)
	}
	for i, r := range rows {
		if i >= len(rep.Issues) {
			t.Fatalf("only %d issues:\n%s", len(rep.Issues), rep)
		}
		if is := rep.Issues[i]; is.Line != i+2 || !strings.Contains(is.Problem, r.problem) {
			t.Errorf("got %q, want line %d with %q", is.Error(), i+2, r.problem)
		}
	}
	if last := rep.Issues[len(rep.Issues)-1]; last.Line != 11 || !strings.Contains(last.Problem, "row is text but the file is chat") {
		t.Errorf("got %q, want line 11 mixed formats", last.Error())
	}
}

// A format is decided by the first row that is valid, not the first line.
func TestFirstValidRowDecides(t *testing.T) {
	file := "garbage\n{\"prompt\": \"p\"}\n{\"prompt\": \"p\", \"completion\": \"c\"}\n{\"text\": \"t\"}\n"
	set, rep, err := ReadJSONL(strings.NewReader(file), "f", textOptions())
	if err != nil {
		t.Fatal(err)
	}
	if set.Format != FormatCompletion || len(set.Examples) != 1 {
		t.Fatalf("format %v with %d examples, want prompt/completion with 1", set.Format, len(set.Examples))
	}
	var lines []int
	for _, is := range rep.Issues {
		lines = append(lines, is.Line)
	}
	if !equal(lines, []int{1, 2, 4}) || !strings.Contains(rep.Issues[1].Problem, `missing field "completion"`) ||
		!strings.Contains(rep.Issues[2].Problem, "decided by line 3") {
		t.Errorf("issues:\n%s", rep)
	}
}

func TestChatNeedsTemplate(t *testing.T) {
	_, rep, err := ReadJSONL(strings.NewReader(`{"messages": [{"role": "assistant", "content": "a"}]}`), "f", textOptions())
	if !errors.Is(err, ErrNoExamples) || len(rep.Issues) != 1 || !strings.Contains(rep.Issues[0].Problem, "chat template") {
		t.Errorf("got %v, %v; want ErrNoExamples and a line-1 issue about the template", err, rep.Issues)
	}
}

func TestBOMAndCRLF(t *testing.T) {
	file := "\xef\xbb\xbf{\"text\": \"a\"}\r\n\r\n{\"text\": \"b\"}\r\n{\"text\": \"c\"}"
	set, rep, err := ReadJSONL(strings.NewReader(file), "f", Options{Tokenizer: &byteTokenizer{}})
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	var got []string
	for _, ex := range set.Examples {
		got = append(got, decode(ex.Tokens)+"@"+ex.Source)
	}
	if want := []string{"<s>a@f:1", "<s>b@f:3", "<s>c@f:4"}; !equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLineAndFileCaps(t *testing.T) {
	long := `{"text": "` + strings.Repeat("x", 100) + `"}`
	file := `{"text": "a"}` + "\n" + long + "\n" + `{"text": "b"}` + "\n"
	opt := textOptions()
	opt.MaxLineBytes = 64
	set, rep, err := ReadJSONL(strings.NewReader(file), "f", opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Examples) != 2 || set.Examples[1].Source != "f:3" {
		t.Errorf("kept %d examples, want lines 1 and 3", len(set.Examples))
	}
	if len(rep.Issues) != 1 || rep.Issues[0].Line != 2 || !strings.Contains(rep.Issues[0].Problem, "longer than 64 bytes") {
		t.Errorf("issues %v, want line 2 too long", rep.Issues)
	}

	opt.MaxFileBytes = 20
	if _, _, err := ReadJSONL(strings.NewReader(file), "f", opt); !errors.Is(err, ErrTooLarge) {
		t.Errorf("read over the file cap: got %v, want ErrTooLarge", err)
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	os.WriteFile(path, []byte(file), 0o644)
	if _, _, err := LoadJSONL(path, opt); !errors.Is(err, ErrTooLarge) {
		t.Errorf("load over the file cap: got %v, want ErrTooLarge", err)
	}
}

func TestIssueCap(t *testing.T) {
	opt := textOptions()
	opt.MaxIssues = 3
	file := strings.Repeat("bad\n", 10) + `{"text": "ok"}`
	_, rep, err := ReadJSONL(strings.NewReader(file), "f", opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Issues) != 3 || rep.Omitted != 7 || rep.Files[0].Bad != 10 {
		t.Errorf("listed %d, omitted %d, bad %d; want 3, 7, 10", len(rep.Issues), rep.Omitted, rep.Files[0].Bad)
	}
}

func TestLoadSplits(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte("{\"text\": \"one\"}\n{\"text\": \"two\"}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "valid.jsonl"), []byte("{\"prompt\": \"p\", \"completion\": \"c\"}\nbroken\n"), 0o644)
	if !IsSplitDir(dir) {
		t.Fatal("IsSplitDir = false, want true")
	}
	s, rep, err := LoadSplits(dir, textOptions())
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	if s.Train == nil || len(s.Train.Examples) != 2 || s.Train.Format != FormatText {
		t.Errorf("train: %+v, want 2 text examples", s.Train)
	}
	if s.Valid == nil || len(s.Valid.Examples) != 1 || s.Valid.Format != FormatCompletion {
		t.Errorf("valid: %+v, want 1 prompt/completion example", s.Valid)
	}
	if s.Test != nil {
		t.Errorf("test = %+v, want nil (no test.jsonl)", s.Test)
	}
	if len(rep.Files) != 2 || len(rep.Issues) != 1 || rep.Issues[0].File != filepath.Join(dir, "valid.jsonl") || rep.Issues[0].Line != 2 {
		t.Errorf("report:\n%s\nwant two files and valid.jsonl:2 invalid", rep)
	}

	empty := t.TempDir()
	if IsSplitDir(empty) {
		t.Error("IsSplitDir(empty) = true")
	}
	if _, _, err := LoadSplits(empty, textOptions()); err == nil {
		t.Error("LoadSplits of a folder without splits: no error")
	}
}

// A lone UTF-16 surrogate escape is not text: encoding/json would turn it into
// U+FFFD without a word. The row is reported and dropped; a proper pair is
// a character like any other.
func TestLoneSurrogateReported(t *testing.T) {
	file := strings.Join([]string{
		`{"text": "pair \ud83d\ude00 ok"}`,              // 1
		`{"text": "lone \ud800 high"}`,                  // 2
		`{"text": "lone \udc00 low"}`,                   // 3
		`{"text": "high then low-less \ud83d\u0041"}`,   // 4
		`{"text": "escaped backslash \\ud800 is text"}`, // 5
		`{"text": "at the end \udbff"}`,                 // 6
	}, "\n")
	set, rep, err := ReadJSONL(strings.NewReader(file), "s.jsonl", textOptions())
	if err != nil {
		t.Fatalf("ReadJSONL: %v\n%s", err, rep)
	}
	var kept []string
	for _, ex := range set.Examples {
		kept = append(kept, ex.Source)
	}
	if want := []string{"s.jsonl:1", "s.jsonl:5"}; !equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	want := []struct {
		line    int
		problem string
	}{
		{2, `field "text": lone UTF-16 surrogate \ud800`},
		{3, `field "text": lone UTF-16 surrogate \udc00`},
		{4, `field "text": lone UTF-16 surrogate \ud83d`},
		{6, `field "text": lone UTF-16 surrogate \udbff`},
	}
	if len(rep.Issues) != len(want) {
		t.Fatalf("got %d issues, want %d:\n%s", len(rep.Issues), len(want), rep)
	}
	for i, w := range want {
		if is := rep.Issues[i]; is.Line != w.line || !strings.Contains(is.Problem, w.problem) {
			t.Errorf("issue %d: got %q, want line %d with %q", i, is.Error(), w.line, w.problem)
		}
	}
	// In chat messages too.
	_, rep, _ = ReadJSONL(strings.NewReader(`{"messages": [{"role": "user", "content": "\ud800"}, {"role": "assistant", "content": "a"}]}`), "c.jsonl", chatOptions())
	if len(rep.Issues) != 1 || !strings.Contains(rep.Issues[0].Problem, `field "messages[0].content": lone UTF-16 surrogate`) {
		t.Errorf("chat row: got %v, want the lone surrogate in messages[0].content reported", rep.Issues)
	}
}

// Fields of another format on a row are ignored, and said to be: a text file
// whose rows also carry prompt/completion trains on the text only.
func TestOtherFormatsFieldsWarned(t *testing.T) {
	file := strings.Join([]string{
		`{"text": "t1"}`, // 1: decides text
		`{"text": "t2", "prompt": "p", "completion": "c"}`, // 2
		`{"text": "t3", "messages": []}`,                   // 3
		`{"text": "t4", "extra": 1}`,                       // 4: not a format's field
	}, "\n")
	set, rep, err := ReadJSONL(strings.NewReader(file), "m.jsonl", textOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Examples) != 4 || len(rep.Issues) != 0 {
		t.Fatalf("kept %d rows with issues %v, want all 4 kept", len(set.Examples), rep.Issues)
	}
	want := []struct {
		line    int
		problem string
	}{
		{2, `"prompt"/"completion" ignored: the file is text (decided by line 1)`},
		{3, `"messages" ignored: the file is text (decided by line 1)`},
	}
	if len(rep.Warnings) != len(want) {
		t.Fatalf("got warnings %v, want %d", rep.Warnings, len(want))
	}
	for i, w := range want {
		if is := rep.Warnings[i]; is.Line != w.line || !strings.Contains(is.Problem, w.problem) {
			t.Errorf("warning %d: got %q, want line %d with %q", i, is.Error(), w.line, w.problem)
		}
	}
	if st := rep.Files[0]; st.Warned != 2 {
		t.Errorf("warned %d rows, want 2", st.Warned)
	}

	// The row that decides the format says so too: prompt/completion wins
	// over text, as in mlx-lm, and the text is ignored.
	set, rep, err = ReadJSONL(strings.NewReader(`{"text": "t", "prompt": "p", "completion": "c"}`), "d.jsonl", textOptions())
	if err != nil || set.Format != FormatCompletion {
		t.Fatalf("format %v, %v; want prompt/completion", set.Format, err)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0].Problem, `"text" ignored: the row is read as prompt/completion`) {
		t.Errorf("warnings %v, want the ignored text named", rep.Warnings)
	}
}

// A file that is one JSON array (what many tools export) is refused as such,
// not as a file of bad rows: pretty-printed, its last element on a line of
// its own would otherwise pass as one valid row.
func TestJSONArrayFileRefused(t *testing.T) {
	for name, file := range map[string]string{
		"one line":    `[{"text": "a"}, {"text": "b"}]`,
		"pretty":      "[\n  {\"text\": \"a\"},\n  {\"text\": \"b\"}\n]\n",
		"after a BOM": "\xef\xbb\xbf\n\n  [{\"text\": \"a\"}]",
		"empty array": "[]",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ReadJSONL(strings.NewReader(file), "arr.json", textOptions())
			if !errors.Is(err, ErrJSONArray) || !errors.Is(err, ErrNoExamples) || !strings.Contains(err.Error(), "arr.json") {
				t.Fatalf("got %v, want ErrJSONArray (and ErrNoExamples) naming the file", err)
			}
		})
	}
}
