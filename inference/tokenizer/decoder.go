package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A decoder turns token strings back into text, as a chain of steps over the
// list of pieces. Pieces are raw bytes: a byte-level or byte-fallback token may
// hold part of a UTF-8 sequence, and only the final text is made valid UTF-8.
// That keeps decoding prefix-stable, which streaming relies on.
type decoder interface {
	decode(pieces []string) []string
}

func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType("decoder", raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var c struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := decodeFields("decoder", typ, raw, &c); err != nil {
			return nil, err
		}
		var seq decoderSequence
		for _, r := range c.Decoders {
			d, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := decodeFields("decoder", typ, raw, &c); err != nil {
			return nil, err
		}
		m, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return replaceDecoder{m, c.Content}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		var c struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := decodeFields("decoder", typ, raw, &c); err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(c.Content)
		if n == 0 || n != len(c.Content) || c.Start < 0 || c.Stop < 0 {
			return nil, fmt.Errorf("decoder Strip: want one character and counts >= 0, got %q %d %d", c.Content, c.Start, c.Stop)
		}
		return stripDecoder{r, c.Start, c.Stop}, nil
	case "Metaspace":
		repl, scheme, _, err := parseMetaspaceConfig(raw, "decoder")
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{replacement: repl, scheme: scheme}, nil
	case "BPEDecoder":
		c := struct {
			Suffix string `json:"suffix"`
		}{Suffix: "</w>"}
		if err := decodeFields("decoder", typ, raw, &c); err != nil {
			return nil, err
		}
		return bpeSuffixDecoder{c.Suffix}, nil
	}
	return nil, fmt.Errorf("decoder: unsupported type %q", typ)
}

type decoderSequence []decoder

func (seq decoderSequence) decode(pieces []string) []string {
	for _, d := range seq {
		pieces = d.decode(pieces)
	}
	return pieces
}

// byteLevelDecoder maps stand-in runes back to bytes and joins the result.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(pieces []string) []string {
	var b []byte
	for _, p := range pieces {
		b = byteLevelDecode(b, p)
	}
	return []string{string(b)}
}

type replaceDecoder struct {
	pattern matcher
	content string
}

func (d replaceDecoder) decode(pieces []string) []string {
	for i, p := range pieces {
		// Patterns here are literal or the native scanners, which cannot fail;
		// a failing regex leaves the piece as it is.
		if s, err := replaceAll(d.pattern, p, d.content); err == nil {
			pieces[i] = s
		}
	}
	return pieces
}

// byteFallbackDecoder turns runs of <0xNN> tokens into their bytes. (The Rust
// library writes one U+FFFD per token of a run that is not valid UTF-8; here
// the final text gets one U+FFFD per ill-formed subsequence, so that text
// decoded so far never changes when more tokens arrive.)
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decode(pieces []string) []string {
	out := pieces[:0]
	var run []byte
	flush := func() {
		if run != nil {
			out = append(out, string(run))
			run = nil
		}
	}
	for _, p := range pieces {
		if b, ok := parseByteToken(p); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, p)
	}
	flush()
	return out
}

// parseByteToken parses "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type fuseDecoder struct{}

func (fuseDecoder) decode(pieces []string) []string {
	return []string{strings.Join(pieces, "")}
}

// stripDecoder removes up to start copies of content from the front of each
// piece and up to stop from its end.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decode(pieces []string) []string {
	for i, p := range pieces {
		for k := 0; k < d.start; k++ {
			r, w := utf8.DecodeRuneInString(p)
			if w == 0 || r != d.content {
				break
			}
			p = p[w:]
		}
		for k := 0; k < d.stop; k++ {
			r, w := utf8.DecodeLastRuneInString(p)
			if w == 0 || r != d.content {
				break
			}
			p = p[:len(p)-w]
		}
		pieces[i] = p
	}
	return pieces
}

// metaspaceDecoder turns ▁ back into spaces, dropping those of the first token
// unless the pre-tokenizer never prepends one.
type metaspaceDecoder struct {
	replacement string
	scheme      prependScheme
}

func (d metaspaceDecoder) decode(pieces []string) []string {
	for i, p := range pieces {
		sp := " "
		if i == 0 && d.scheme != prependNever {
			sp = ""
		}
		pieces[i] = strings.ReplaceAll(p, d.replacement, sp)
	}
	return pieces
}

// bpeSuffixDecoder turns the end-of-word suffix into a space (none after the
// last token).
type bpeSuffixDecoder struct{ suffix string }

func (d bpeSuffixDecoder) decode(pieces []string) []string {
	for i, p := range pieces {
		sp := " "
		if i == len(pieces)-1 {
			sp = ""
		}
		pieces[i] = strings.ReplaceAll(p, d.suffix, sp)
	}
	return pieces
}
