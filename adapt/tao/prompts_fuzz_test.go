package tao

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParsePrompts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"What is a hacker?\n\n# a comment\nTell me about Unix.", []string{"What is a hacker?", "Tell me about Unix."}, ""},
		{"{\"prompt\": \" Why? \", \"completion\": \"because\"}\r\nplain\r\n", []string{"Why?", "plain"}, ""},
		{"", nil, ""},
		{"ok\n{\"completion\": \"x\"}\n", nil, "line 2"},
		{"{not json\n", nil, "line 1"},
		{"a\n\xff\xfe\n", nil, "line 2: not valid UTF-8"},
		{strings.Repeat("x", MaxPromptBytes+1), nil, "line 1 is longer"},
	} {
		got, err := ParsePrompts(strings.NewReader(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParsePrompts(%.30q): error %v, want one containing %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("ParsePrompts(%.30q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func FuzzParsePrompts(f *testing.F) {
	for _, s := range []string{"What is a hacker?\nTell me.", "{\"prompt\": \"x\"}\n", "{", "#\n\n", "a\r\nb\r\n", "{\"prompt\": null}"} {
		f.Add(s)
	}
	f.Add(strings.Join(demoPrompts(), "\n"))
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParsePrompts(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, p := range got {
			if p == "" || p != strings.TrimSpace(p) || !utf8.ValidString(p) || len(p) > MaxPromptBytes {
				t.Fatalf("prompt %q from %q", p, in)
			}
		}
	})
}
