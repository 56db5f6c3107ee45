package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Native scanners for the pre-tokenizer regexes of GPT-2 (gpt2Pattern) and of
// Llama 3 and Qwen 2/3 (llama3Pattern, qwen2Pattern). Each is the regex's
// leftmost-first alternation worked out by hand. Both patterns match at every
// position, so the matches tile the input.

// Character classes, as \p{L}, \p{N} and \s (Unicode White_Space) see them.
const (
	classOther byte = iota // punctuation, symbols, controls
	classLetter
	classNumber
	classSpace
)

var asciiClass = func() (t [utf8.RuneSelf]byte) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			t[c] = classLetter
		case '0' <= c && c <= '9':
			t[c] = classNumber
		case c == ' ', '\t' <= c && c <= '\r':
			t[c] = classSpace
		}
	}
	return t
}()

func classOf(r rune) byte {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at s[i:] with its class.
func runeAt(s string, i int) (r rune, w int, class byte) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w = utf8.DecodeRuneInString(s[i:])
	return r, w, classOf(r)
}

// runEnd returns the end of the run of class c starting at i.
func runEnd(s string, i int, c byte) int {
	for i < len(s) {
		_, w, k := runeAt(s, i)
		if k != c {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at s[i:] (s[i] is
// the apostrophe), or 0. foldCase matches letters regardless of case, with
// U+017F LONG S folding to s as in Unicode case folding.
func contraction(s string, i int, foldCase bool) int {
	lower := func(j int) (rune, int) {
		if j >= len(s) {
			return 0, 0
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if foldCase {
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			} else if r == 0x17F {
				r = 's'
			}
		}
		return r, w
	}
	r, w := lower(i + 1)
	switch r {
	case 's', 't', 'm', 'd':
		return 1 + w
	case 'r', 'v', 'l':
		r2, w2 := lower(i + 1 + w)
		if (r == 'r' || r == 'v') && r2 == 'e' || r == 'l' && r2 == 'l' {
			return 1 + w + w2
		}
	}
	return 0
}

// whitespaceMatch handles the alternatives \s+(?!\S)|\s+ at a whitespace
// rune: the whole run at the end of the text, else the run less its last
// rune (which then leads the next word), else a single rune.
func whitespaceMatch(s string, i int) int {
	end := runEnd(s, i, classSpace)
	if end == len(s) {
		return end - i
	}
	_, last := utf8.DecodeLastRuneInString(s[:end])
	if end-last > i {
		return end - last - i
	}
	return end - i
}

// gpt2Scanner: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
type gpt2Scanner struct{}

func (gpt2Scanner) find(s string, emit func(start, end int)) error {
	for i := 0; i < len(s); {
		n := gpt2Next(s, i)
		emit(i, i+n)
		i += n
	}
	return nil
}

// SplitGPT2 calls emit with each piece of s as GPT-2's pre-tokenizer pattern splits
// it (the pieces tile s). The BPE trainer uses it so that it learns merges on
// exactly the words this package will later encode.
func SplitGPT2(s string, emit func(piece string)) {
	for i := 0; i < len(s); {
		n := gpt2Next(s, i)
		emit(s[i : i+n])
		i += n
	}
}

func gpt2Next(s string, i int) int {
	r, w, class := runeAt(s, i)
	if r == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return n
		}
	}
	// " ?X+" for X in letters, numbers, others: an optional space, then a run.
	j, c := i, class
	if r == ' ' && i+w < len(s) {
		if _, _, next := runeAt(s, i+w); next != classSpace {
			j, c = i+w, next
		}
	}
	if c != classSpace {
		return runEnd(s, j, c) - i
	}
	return whitespaceMatch(s, i)
}

// llamaScanner: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ with K = maxDigits
// (3 for Llama 3, 1 for Qwen).
type llamaScanner struct{ maxDigits int }

func (sc llamaScanner) find(s string, emit func(start, end int)) error {
	for i := 0; i < len(s); {
		n := sc.next(s, i)
		emit(i, i+n)
		i += n
	}
	return nil
}

func (sc llamaScanner) next(s string, i int) int {
	r, w, class := runeAt(s, i)
	if r == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if class == classLetter {
		return runEnd(s, i, classLetter) - i
	}
	if r != '\r' && r != '\n' && class != classNumber && i+w < len(s) {
		if _, _, next := runeAt(s, i+w); next == classLetter {
			return runEnd(s, i+w, classLetter) - i
		}
	}
	// \p{N}{1,K}
	if class == classNumber {
		j := i
		for k := 0; k < sc.maxDigits && j < len(s); k++ {
			_, w, c := runeAt(s, j)
			if c != classNumber {
				break
			}
			j += w
		}
		return j - i
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if r == ' ' && i+w < len(s) {
		if _, _, next := runeAt(s, i+w); next == classOther {
			j = i + w
		}
	}
	if _, _, c := runeAt(s, j); c == classOther {
		j = runEnd(s, j, classOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}
	// \s*[\r\n]+: through the last line break of the whitespace run.
	end := runEnd(s, i, classSpace)
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1 - i
		}
	}
	return whitespaceMatch(s, i)
}
