package chat

import (
	"fmt"
	"strings"
	"unicode"
)

// tojsonFilter is the name that prepareSource gives every `| tojson` so that
// our Python-faithful encoder (pyjson.go) runs instead of the engine's own,
// which sorts keys and escapes HTML when asked to indent.
const tojsonFilter = "inloop_tojson"

var (
	closers       = map[byte]string{'{': "}}", '%': "%}", '#': "#}"}
	stringEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
)

// token is a piece of template source: literal text, or a tag.
type token struct {
	kind  byte   // 0 for text, else '{' (expression), '%' (statement), '#' (comment)
	text  string // the literal text, or the tag's content without delimiters and markers
	left  byte   // whitespace marker after the opener: '-', '+' or 0
	right byte   // whitespace marker before the closer
	line  int
}

func (t *token) block() bool { return t.kind == '%' || t.kind == '#' }

// prepareSource rewrites a chat template so that the engine renders it
// exactly as Jinja2 does inside transformers' apply_chat_template, which
// compiles templates with trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False and a `generation` tag.
//
// Whitespace control is lexical, so it is done here, once, with Jinja2's
// rules: newlines are normalised and one trailing newline dropped; a "-"
// marker strips all whitespace on its side; lstrip_blocks removes the spaces
// before a {% or {# tag that begins its line (unless {%+); trim_blocks
// removes the newline right after a %} or #} (unless +%}). The result has no
// markers and no literal text left: every text run becomes a string
// expression, comments and generation tags are dropped. The engine has
// whitespace rules of its own for text next to block tags, but they look past
// intervening tags; with no text segments left, they have nothing to act on.
//
// Every `| tojson` is renamed to our own filter too.
func prepareSource(src string) (string, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")

	toks, err := tokenize(src)
	if err != nil {
		return "", err
	}

	lineStarting := true // Jinja2's line_starting: the last tag ended a line
	for i := range toks {
		t := &toks[i]
		if t.kind == 0 {
			continue
		}
		var prev, next *token
		if i > 0 && toks[i-1].kind == 0 {
			prev = &toks[i-1]
		}
		if i+1 < len(toks) && toks[i+1].kind == 0 {
			next = &toks[i+1]
		}

		if prev != nil {
			switch {
			case t.left == '-':
				prev.text = strings.TrimRightFunc(prev.text, isPySpace)
			case t.block() && t.left != '+':
				l := strings.LastIndexByte(prev.text, '\n') + 1
				if (l > 0 || lineStarting) && l < len(prev.text) && strings.TrimLeftFunc(prev.text[l:], isPySpace) == "" {
					prev.text = prev.text[:l]
				}
			}
		}

		lineStarting = false
		if next != nil {
			switch {
			case t.right == '-':
				rest := strings.TrimLeftFunc(next.text, isPySpace)
				lineStarting = strings.HasSuffix(next.text[:len(next.text)-len(rest)], "\n")
				next.text = rest
			case t.block() && t.right != '+' && strings.HasPrefix(next.text, "\n"):
				next.text = next.text[1:]
				lineStarting = true
			}
		}
	}

	var out strings.Builder
	out.Grow(len(src) + len(src)/4)
	for _, t := range toks {
		switch {
		case t.kind == 0:
			if t.text != "" {
				out.WriteString(`{{ "`)
				out.WriteString(stringEscaper.Replace(t.text))
				out.WriteString(`" }}`)
			}
		case t.kind == '#', t.kind == '%' && isTag(t.text, "generation", "endgeneration"):
			// transformers' AssistantTracker renders a generation block's
			// body unchanged; comments print nothing.
		default:
			out.WriteByte('{')
			out.WriteByte(t.kind)
			out.WriteString(renameTojson(t.text))
			out.WriteString(closers[t.kind])
		}
	}
	return out.String(), nil
}

// tokenize splits template source into text and tags. A tag ends at the
// first closer outside a quoted string (comments ignore quotes), as in the
// engine's own scanner. The body of {% raw %} ... {% endraw %} is text.
func tokenize(src string) ([]token, error) {
	var toks []token
	// line numbers the line at byte at, counting on from the last call (at
	// only grows), so that a template of many tags is tokenized in linear
	// time.
	lineNo, counted := 1, 0
	line := func(at int) int {
		lineNo += strings.Count(src[counted:at], "\n")
		counted = at
		return lineNo
	}
	text := func(s string) {
		if s != "" {
			toks = append(toks, token{text: s})
		}
	}
	i := 0
	for i < len(src) {
		open := indexTagOpen(src, i)
		if open < 0 {
			text(src[i:])
			break
		}
		text(src[i:open])
		kind := src[open+1]
		closer := closers[kind]
		end, ok := findCloser(src, open+2, closer, kind != '#')
		if !ok {
			return nil, fmt.Errorf("line %d: unclosed %s tag", line(open), closer)
		}
		t := token{kind: kind, text: src[open+2 : end], line: line(open)}
		if s := t.text; s != "" && (s[0] == '-' || s[0] == '+') {
			t.left, t.text = s[0], s[1:]
		}
		if s := t.text; s != "" && (s[len(s)-1] == '-' || s[len(s)-1] == '+') {
			t.right, t.text = s[len(s)-1], s[:len(s)-1]
		}
		toks = append(toks, t)
		i = end + len(closer)

		if kind == '%' && isTag(t.text, "raw") {
			body, endTag, after, ok := cutRaw(src, i)
			if !ok {
				return nil, fmt.Errorf("line %d: unclosed raw block", t.line)
			}
			text(body)
			toks = append(toks, endTag)
			i = after
		}
	}
	// The raw tags themselves print nothing once their body is text.
	kept := toks[:0]
	for _, t := range toks {
		if t.kind == '%' && (isTag(t.text, "raw") || isTag(t.text, "endraw")) {
			t.kind = '#'
		}
		kept = append(kept, t)
	}
	return kept, nil
}

// indexTagOpen finds the next "{{", "{%" or "{#" at or after from.
func indexTagOpen(src string, from int) int {
	for j := from; j+1 < len(src); j++ {
		if src[j] == '{' && (src[j+1] == '{' || src[j+1] == '%' || src[j+1] == '#') {
			return j
		}
	}
	return -1
}

// cutRaw finds the {% endraw %} that closes a raw block whose body starts at
// from, returning the body, the end tag and where the source goes on.
func cutRaw(src string, from int) (body string, end token, after int, ok bool) {
	for j := from; ; {
		k := strings.Index(src[j:], "{%")
		if k < 0 {
			return "", token{}, 0, false
		}
		k += j
		e := strings.Index(src[k+2:], "%}")
		if e < 0 {
			return "", token{}, 0, false
		}
		e += k + 2
		t := token{kind: '%', text: src[k+2 : e]}
		if s := t.text; s != "" && (s[0] == '-' || s[0] == '+') {
			t.left, t.text = s[0], s[1:]
		}
		if s := t.text; s != "" && (s[len(s)-1] == '-' || s[len(s)-1] == '+') {
			t.right, t.text = s[len(s)-1], s[:len(s)-1]
		}
		if isTag(t.text, "endraw") {
			return src[from:k], t, e + 2, true
		}
		j = k + 2
	}
}

// findCloser returns the index of closer in src at or after from, skipping
// quoted strings when quotes is set.
func findCloser(src string, from int, closer string, quotes bool) (int, bool) {
	for j := from; j+1 < len(src); j++ {
		c := src[j]
		if quotes && (c == '\'' || c == '"') {
			j++
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			continue
		}
		if c == closer[0] && src[j+1] == closer[1] {
			return j, true
		}
	}
	return 0, false
}

// isTag reports whether a statement's content is exactly one of the keywords.
func isTag(content string, keywords ...string) bool {
	f := strings.TrimSpace(content)
	for _, k := range keywords {
		if f == k {
			return true
		}
	}
	return false
}

// isPySpace is Python's str.isspace for one character.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// renameTojson replaces the filter name in `| tojson` (outside string
// literals) with tojsonFilter.
func renameTojson(expr string) string {
	if !strings.Contains(expr, "tojson") {
		return expr
	}
	var b strings.Builder
	for j := 0; j < len(expr); j++ {
		c := expr[j]
		if c == '\'' || c == '"' {
			k := j + 1
			for k < len(expr) && expr[k] != c {
				if expr[k] == '\\' {
					k++
				}
				k++
			}
			k = min(k, len(expr)-1)
			b.WriteString(expr[j : k+1])
			j = k
			continue
		}
		b.WriteByte(c)
		if c != '|' {
			continue
		}
		k := j + 1
		for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
			k++
		}
		if strings.HasPrefix(expr[k:], "tojson") && (k+6 == len(expr) || !isIdentByte(expr[k+6])) {
			b.WriteString(expr[j+1 : k])
			b.WriteString(tojsonFilter)
			j = k + 5
		}
	}
	return b.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
