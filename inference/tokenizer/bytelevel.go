package tokenizer

import "unicode/utf8"

// Byte-level BPE (GPT-2 and its descendants) works on bytes, each written as a
// printable rune so that vocabularies stay readable: printable Latin-1 bytes
// stand for themselves, the other 68 bytes for U+0100 onwards, in order.

var (
	byteToRune [256]rune
	runeToByte [0x144]int16 // -1 where a rune stands for no byte
	// byteToToken holds byteToRune as UTF-8, to append without encoding.
	byteToToken [256]string
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(0x100)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !('!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = next
			next++
		}
		byteToRune[b] = r
		runeToByte[r] = int16(b)
		byteToToken[b] = string(r)
	}
}

// byteLevelString writes each byte of s as its stand-in rune.
func byteLevelString(s string) string {
	return string(appendByteLevel(make([]byte, 0, 2*len(s)), s))
}

func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = append(dst, byteToToken[s[i]]...)
	}
	return dst
}

// byteLevelDecode turns a token of stand-in runes back into its bytes. A token
// with any other rune (an added token such as "<|im_start|>" typed in another
// alphabet) is kept as it is.
func byteLevelDecode(dst []byte, tok string) []byte {
	n := len(dst)
	for _, r := range tok {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return append(dst[:n], tok...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}

// lossyUTF8 replaces each maximal ill-formed subsequence of b with U+FFFD
// (the W3C/Unicode "substitution of maximal subparts" practice).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out = append(out, b[i:i+w]...)
			i += w
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidPrefixLen(b[i:])
	}
	return string(out)
}

// invalidPrefixLen returns how many bytes at the start of b form the maximal
// prefix of a well-formed sequence (at least 1): that many bytes become one
// U+FFFD.
func invalidPrefixLen(b []byte) int {
	need := 0
	lo, hi := byte(0x80), byte(0xBF)
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// incompleteTail returns the length of a trailing sequence of b that is the
// start of a well-formed UTF-8 code point still missing bytes (0 to 3).
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a lead byte: is the tail after it a proper prefix?
			tail := b[len(b)-k:]
			if invalidPrefixLen(tail) == k && !utf8.FullRune(tail) {
				return k
			}
			return 0
		}
	}
	return 0
}
