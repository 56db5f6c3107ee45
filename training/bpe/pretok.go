package bpe

import (
	"strings"

	"github.com/inloop/inloop/inference/tokenizer"
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

// splitGPT2 calls emit with each piece of s as GPT2Pattern splits it, using the
// tokenizer's own scanner so that training and encoding split text identically.
func splitGPT2(s string, emit func(string)) { tokenizer.SplitGPT2(s, emit) }

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
