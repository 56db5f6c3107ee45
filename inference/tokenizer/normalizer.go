package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// A normalizer rewrites each stretch of text between added tokens before it is
// split into words.
type normalizer interface {
	normalize(s string) (string, error)
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType("normalizer", raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var c struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := decodeFields("normalizer", typ, raw, &c); err != nil {
			return nil, err
		}
		var seq normalizerSequence
		for _, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "NFC":
		return nfcNormalizer{}, nil
	case "NFD":
		return nfdNormalizer{}, nil
	case "Prepend":
		var c struct {
			Prepend string `json:"prepend"`
		}
		if err := decodeFields("normalizer", typ, raw, &c); err != nil {
			return nil, err
		}
		return prependNormalizer{c.Prepend}, nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := decodeFields("normalizer", typ, raw, &c); err != nil {
			return nil, err
		}
		m, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replaceNormalizer{m, c.Content}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		var c struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := decodeFields("normalizer", typ, raw, &c); err != nil {
			return nil, err
		}
		return stripNormalizer{c.Left, c.Right}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "ByteLevel":
		return byteLevelNormalizer{}, nil
	}
	return nil, fmt.Errorf("normalizer: unsupported type %q", typ)
}

type normalizerSequence []normalizer

func (seq normalizerSequence) normalize(s string) (string, error) {
	for _, n := range seq {
		var err error
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

type nfcNormalizer struct{}

func (nfcNormalizer) normalize(s string) (string, error) { return NFC(s), nil }

type nfdNormalizer struct{}

func (nfdNormalizer) normalize(s string) (string, error) { return NFD(s), nil }

// prependNormalizer puts a prefix (Metaspace's ▁ for sentencepiece-style
// models) before any non-empty text.
type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return n.prefix + s, nil
}

type replaceNormalizer struct {
	pattern matcher
	content string
}

func (n replaceNormalizer) normalize(s string) (string, error) {
	return replaceAll(n.pattern, s, n.content)
}

// replaceAll replaces every match of m in s with the literal content.
func replaceAll(m matcher, s, content string) (string, error) {
	var b strings.Builder
	last := 0
	err := m.find(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last = end
	})
	if err != nil {
		return "", err
	}
	if last == 0 {
		return s, nil
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) (string, error) {
	// Full lowercase mapping where it differs from the simple one: İ -> i̇.
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307")), nil
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) (string, error) {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// stripAccentsNormalizer drops nonspacing marks; tokenizers put it after NFD.
type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s), nil
}

// byteLevelNormalizer maps every byte to its printable stand-in, as the
// ByteLevel pre-tokenizer does, without splitting.
type byteLevelNormalizer struct{}

func (byteLevelNormalizer) normalize(s string) (string, error) {
	return byteLevelString(s), nil
}
