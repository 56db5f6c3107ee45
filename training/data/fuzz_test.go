package data

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzJSONL: the reader never panics, every issue names a line of the input,
// every example's mask matches its tokens and its source names a line.
func FuzzJSONL(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.jsonl")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("{\"text\": \"a\"}\n" + `{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}`))
	f.Add([]byte(`{"messages": [{"role": "assistant", "content": "\u0000"}]}` + "\r\n[\n{\"text\":null}\n\"s\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		opt := chatOptions()
		opt.MaxLineBytes = 512
		opt.MaxFileBytes = 1 << 20
		set, rep, err := ReadJSONL(bytes.NewReader(data), "fuzz.jsonl", opt)
		if err != nil && !errors.Is(err, ErrNoExamples) {
			t.Fatalf("unexpected error: %v", err)
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, is := range append(rep.Issues, rep.Warnings...) {
			if is.Line < 1 || is.Line > lines || is.File != "fuzz.jsonl" || is.Problem == "" {
				t.Fatalf("issue %q outside the input's %d lines", is.Error(), lines)
			}
		}
		st := rep.Files[0]
		if st.Examples+st.Bad != st.Rows || st.Examples != len(set.Examples) {
			t.Fatalf("stats %+v do not add up (%d examples)", st, len(set.Examples))
		}
		for _, ex := range set.Examples {
			if len(ex.Mask) != len(ex.Tokens) || ex.Targets() == 0 && len(ex.Tokens) > 1 && set.Format != FormatText {
				t.Fatalf("%s: %d tokens, %d mask entries, %d targets", ex.Source, len(ex.Tokens), len(ex.Mask), ex.Targets())
			}
		}
	})
}
