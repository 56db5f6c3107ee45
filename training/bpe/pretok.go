package bpe

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// GPT2Pattern is the pre-tokenizer split that the written tokenizer.json asks
// for (ByteLevel with use_regex true). The trainer splits its text with a
// hand-written scanner for it, which the tests hold equal to the regex.
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// Byte-level BPE works on bytes, each written as a printable rune: printable
// Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards, in
// byte order. Token ids 0..255 are the bytes in the order of their runes, as in
// GPT-2's vocabulary ("!" is 0, "Ġ" (the space) is 220).
var (
	byteToRune  [256]rune
	byteToToken [256]string // byteToRune as UTF-8
	byteID      [256]int32  // the token id of each byte
	idByte      [256]byte   // the byte of each of the first 256 ids
)

func init() {
	next := rune(0x100)
	for b := range 256 {
		r := rune(b)
		if !('!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = next
			next++
		}
		byteToRune[b] = r
		byteToToken[b] = string(r)
	}
	id := int32(0)
	for r := rune(0); r < next; r++ {
		for b := range 256 {
			if byteToRune[b] == r {
				byteID[b], idByte[id] = id, byte(b)
				id++
			}
		}
	}
}

// byteLevel writes each byte of s as its stand-in rune.
func byteLevel(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteToToken[s[i]])
	}
	return sb.String()
}

// Character classes as \p{L}, \p{N} and \s see them.
const (
	classOther byte = iota
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

func runeAt(s string, i int) (r rune, w int, class byte) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w = utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.IsLetter(r):
		class = classLetter
	case unicode.IsNumber(r):
		class = classNumber
	case unicode.IsSpace(r):
		class = classSpace
	}
	return r, w, class
}

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

// splitGPT2 calls emit with each piece of s as GPT2Pattern splits it. The
// pattern matches at every position, so the pieces tile s.
func splitGPT2(s string, emit func(string)) {
	for i := 0; i < len(s); {
		n := gpt2Next(s, i)
		emit(s[i : i+n])
		i += n
	}
}

// gpt2Next returns the length of the match of GPT2Pattern at s[i:].
func gpt2Next(s string, i int) int {
	r, w, class := runeAt(s, i)
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return 3
			}
		}
	}
	// " ?X+" for X in letters, numbers, others.
	j, c := i, class
	if r == ' ' && i+w < len(s) {
		if _, _, next := runeAt(s, i+w); next != classSpace {
			j, c = i+w, next
		}
	}
	if c != classSpace {
		return runEnd(s, j, c) - i
	}
	// \s+(?!\S)|\s+: the whole run at the end of the text, else the run less
	// its last rune (which then leads the next piece), else one rune.
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

// splitSpecial calls emit with the parts of s between occurrences of the
// special tokens, which are cut out: they are never part of a word. At one
// position the longest special token wins.
func splitSpecial(s string, specials []string, emit func(string)) {
	if len(specials) == 0 {
		if s != "" {
			emit(s)
		}
		return
	}
	next := make([]int, len(specials)) // next occurrence of each, -1 if none
	find := func(k, from int) {
		if j := strings.Index(s[from:], specials[k]); j >= 0 {
			next[k] = from + j
		} else {
			next[k] = -1
		}
	}
	for k := range specials {
		find(k, 0)
	}
	for pos := 0; ; {
		best, bestLen := -1, 0
		for k, n := range next {
			if n >= 0 && (best < 0 || n < best || n == best && len(specials[k]) > bestLen) {
				best, bestLen = n, len(specials[k])
			}
		}
		if best < 0 {
			if pos < len(s) {
				emit(s[pos:])
			}
			return
		}
		if best > pos {
			emit(s[pos:best])
		}
		pos = best + bestLen
		for k, n := range next {
			if n >= 0 && n < pos {
				find(k, pos)
			}
		}
	}
}
