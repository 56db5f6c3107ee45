// Package termsafe makes untrusted text safe to print on a terminal or in a
// log. A tensor name, a token, a chat template's error message or a model's
// reply can hold control characters that a terminal obeys as commands: clear
// the screen, set the window title, move the cursor over earlier lines. Names
// are quoted where messages are made (%q); this package is the last line at
// the places the command line prints whole messages and replies.
package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with every character a terminal could act on written as a
// Go escape instead: C0 and C1 control characters (ESC as \x1b, CSI as
// \u009b), DEL, a carriage return (\x0d) not followed by a line feed, invalid UTF-8
// bytes (\xff), and the Unicode controls that reorder or hide text on screen
// (bidirectional overrides and isolates, \u202e). Newlines and tabs are kept,
// so messages and replies still read as text. s is returned as is when it
// needs nothing, which is nearly always.
func String(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(s, i, r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !unsafe(s, i, r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case r < 0x80:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(r)|0x100, 16)[1:])
		default:
			b.WriteString(`\u`)
			b.WriteString(strconv.FormatUint(uint64(r)|0x10000, 16)[1:])
		}
		i += size
	}
	return b.String()
}

// unsafe reports whether the rune r of size bytes at s[i:] must be escaped.
func unsafe(s string, i int, r rune, size int) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == '\r':
		return i+1 >= len(s) || s[i+1] != '\n'
	case r < 0x20 || r >= 0x7f && r < 0xa0:
		return true
	case r == utf8.RuneError && size == 1:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional embeddings, overrides, isolates and marks
	case r == 0x2028 || r == 0x2029:
		return true // line and paragraph separators
	}
	return false
}
