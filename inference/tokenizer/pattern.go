package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// A matcher finds the non-overlapping matches of a pattern in s, left to
// right, and reports each as a byte range.
type matcher interface {
	find(s string, emit func(start, end int)) error
}

// Patterns in tokenizer.json are either literal strings or regular
// expressions in the Oniguruma dialect the Rust library uses. The pre-tokenizer
// regexes of GPT-2, Llama 3 and Qwen need lookahead, which Go's regexp lacks,
// so they run on regexp2 — or, being the hot path of every encode, on
// hand-written scanners that FuzzScanners holds equal to regexp2.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// regexTimeout bounds one regex search, so a pathological pattern in a
// tokenizer file fails an encode instead of hanging it.
const regexTimeout = 10 * time.Second

var errNoPattern = errors.New("pattern: want {\"String\": ...} or {\"Regex\": ...}")

func compilePattern(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		return compileRegex(*p.Regex, true)
	}
	return nil, errNoPattern
}

// compileRegex compiles expr, using a native scanner for the well-known
// pre-tokenizer patterns when native is set.
func compileRegex(expr string, native bool) (matcher, error) {
	if native {
		switch expr {
		case gpt2Pattern:
			return gpt2Scanner{}, nil
		case llama3Pattern:
			return llamaScanner{maxDigits: 3}, nil
		case qwen2Pattern:
			return llamaScanner{maxDigits: 1}, nil
		}
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", expr, err)
	}
	re.MatchTimeout = regexTimeout
	return regexMatcher{re}, nil
}

type literalMatcher string

func (m literalMatcher) find(s string, emit func(start, end int)) error {
	if m == "" {
		return nil
	}
	for i := 0; ; {
		j := strings.Index(s[i:], string(m))
		if j < 0 {
			return nil
		}
		emit(i+j, i+j+len(m))
		i += j + len(m)
	}
}

type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) find(s string, emit func(start, end int)) error {
	runes := []rune(s)
	match, err := m.re.FindRunesMatch(runes)
	// regexp2 counts in runes; walk s alongside to turn them into byte offsets.
	// []rune(s) yields one rune per utf8.DecodeRuneInString step, invalid bytes
	// included, so the two walks agree.
	ri, bi := 0, 0
	advance := func(to int) int {
		for ri < to {
			_, w := utf8.DecodeRuneInString(s[bi:])
			bi += w
			ri++
		}
		return bi
	}
	for err == nil && match != nil {
		start := advance(match.Index)
		end := advance(match.Index + match.Length)
		emit(start, end)
		match, err = m.re.FindNextMatch(match)
	}
	if err != nil {
		return fmt.Errorf("regex %q: %w", m.re.String(), err)
	}
	return nil
}
