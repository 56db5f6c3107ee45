package safetensors

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads the JSON of a safetensors header or index in one pass over
// the bytes, allocating only the strings it returns. encoding/json's
// token-by-token Decoder, which this replaces, boxed every token and cost
// about 2 KB and 4 µs per tensor: 100,000 tiny tensors (a valid file) took
// 200 MB and most of a second, and more on a slower disk-bound machine.
//
// It accepts exactly RFC 8259 JSON, with one deliberate difference from
// encoding/json: a \u escape of a lone UTF-16 surrogate is an error, as it is
// in serde_json (the reference implementation's parser), instead of becoming
// U+FFFD, so that two distinct names in a file can never read as one.
type scanner struct {
	b []byte
	i int
}

// maxSkipDepth bounds the nesting of values skipped as unknown fields;
// encoding/json allows the same.
const maxSkipDepth = 10000

var errEnd = errors.New("unexpected end of JSON")

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// atEnd reports whether only whitespace is left.
func (s *scanner) atEnd() bool {
	s.ws()
	return s.i == len(s.b)
}

// syntax describes what is wrong at the current position.
func (s *scanner) syntax(what string) error {
	if s.i >= len(s.b) {
		return errEnd
	}
	return fmt.Errorf("invalid character %q %s at byte %d", s.b[s.i], what, s.i)
}

// delim consumes c if it is next.
func (s *scanner) delim(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// next reports whether a container holds another element after the ones
// read so far (first says none were), consuming the comma between them, or
// consumes the closing delimiter and returns false.
func (s *scanner) next(close byte, first bool) (bool, error) {
	if s.delim(close) {
		return false, nil
	}
	if !first && !s.delim(',') {
		return false, s.syntax(fmt.Sprintf("after a value, want ',' or %q", close))
	}
	if first || s.peek() != close {
		return true, nil
	}
	return false, s.syntax("after ','")
}

// colon consumes the ':' after an object key.
func (s *scanner) colon() error {
	if s.delim(':') {
		return nil
	}
	return s.syntax("after an object key")
}

// str reads a string. Most names need no unescaping, and then the result is
// the one allocation.
func (s *scanner) str() (string, error) {
	b, err := s.strBytes()
	return string(b), err
}

// strBytes reads a string; without escapes the result is a view into the
// scanned bytes, not a copy.
func (s *scanner) strBytes() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.syntax("where a string belongs")
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], nil
		case c == '\\':
			return s.strSlow(start)
		case c < 0x20:
			return nil, s.syntax("in a string")
		default:
			s.i++
		}
	}
	return nil, errEnd
}

// strSlow finishes a string holding escapes, from its start.
func (s *scanner) strSlow(start int) ([]byte, error) {
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return buf, nil
		case c < 0x20:
			return nil, s.syntax("in a string")
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return nil, errEnd
		}
		s.i++
		switch e := s.b[s.i]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := s.hex4(s.i + 1)
			if err != nil {
				return nil, err
			}
			s.i += 4
			if utf16.IsSurrogate(r) {
				lo := rune(-1)
				if s.i+2 < len(s.b) && s.b[s.i+1] == '\\' && s.b[s.i+2] == 'u' {
					if lo, err = s.hex4(s.i + 3); err != nil {
						return nil, err
					}
				}
				dec := utf16.DecodeRune(r, lo)
				if dec == utf8.RuneError {
					return nil, fmt.Errorf("lone UTF-16 surrogate \\u%04x in a string at byte %d", r, s.i-5)
				}
				r = dec
				s.i += 6
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return nil, s.syntax("in a string escape")
		}
		s.i++
	}
	return nil, errEnd
}

// hex4 reads the four hex digits of a \u escape starting at j.
func (s *scanner) hex4(j int) (rune, error) {
	if j+4 > len(s.b) {
		return 0, errEnd
	}
	var r rune
	for _, c := range s.b[j : j+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, fmt.Errorf("invalid \\u escape at byte %d", j-2)
		}
		r = r<<4 | rune(c)
	}
	return r, nil
}

// num reads a number and returns its text, checked against JSON's grammar;
// the text is a view into the scanned bytes.
func (s *scanner) num() ([]byte, error) {
	s.ws()
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	lead := s.i
	if n := digits(); n == 0 || n > 1 && s.b[lead] == '0' {
		s.i = lead
		return nil, s.syntax("in a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return nil, s.syntax("in a number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return nil, s.syntax("in a number")
		}
	}
	return s.b[start:s.i], nil
}

// literal consumes true, false or null if it is next.
func (s *scanner) literal() (string, bool) {
	s.ws()
	for _, w := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
			s.i += len(w)
			return w, true
		}
	}
	return "", false
}

// describe names the value that comes next, for an error message, without
// consuming it: "string \"x\"", a number's text, "null", or the delimiter
// quoted.
func (s *scanner) describe() string {
	save := s.i
	defer func() { s.i = save }()
	switch c := s.peek(); {
	case s.i == len(s.b):
		return "the end of the JSON"
	case c == '"':
		if v, err := s.str(); err == nil {
			return "string " + quoteName(v)
		}
		return "an invalid string"
	case c == '-' || c >= '0' && c <= '9':
		if v, err := s.num(); err == nil {
			return tokString(string(v))
		}
		return "an invalid number"
	case c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':':
		return strconv.Quote(string(c))
	}
	if w, ok := s.literal(); ok {
		return w
	}
	return fmt.Sprintf("invalid character %q", s.b[s.i])
}

// skip reads past one value of any kind, checking its syntax, without
// recursion: the nesting depth is bounded by maxSkipDepth, not the stack.
func (s *scanner) skip() error {
	var stack []byte // the closers of the open containers
	for {
		// A value.
		switch c := s.peek(); {
		case c == '{' || c == '[':
			if len(stack) == maxSkipDepth {
				return fmt.Errorf("values nested more than %d deep", maxSkipDepth)
			}
			s.i++
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if s.delim(closer) {
				break // empty container: a complete value
			}
			stack = append(stack, closer)
			if closer == '}' {
				if _, err := s.str(); err != nil {
					return err
				}
				if err := s.colon(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if _, err := s.str(); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if _, err := s.num(); err != nil {
				return err
			}
		default:
			if _, ok := s.literal(); !ok {
				return s.syntax("where a value belongs")
			}
		}
		// After a value: close containers, or go on to the next element.
		for {
			if len(stack) == 0 {
				return nil
			}
			closer := stack[len(stack)-1]
			if s.delim(closer) {
				stack = stack[:len(stack)-1]
				continue
			}
			if !s.delim(',') {
				return s.syntax(fmt.Sprintf("after a value, want ',' or %q", closer))
			}
			if closer == '}' {
				if _, err := s.str(); err != nil {
					return err
				}
				if err := s.colon(); err != nil {
					return err
				}
			}
			break
		}
	}
}
