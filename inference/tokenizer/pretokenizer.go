package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// word is a piece of text on its way to the model. first marks the piece that
// begins at the very start of the input, which Metaspace's prepend_scheme
// "first" treats differently. byteLevel marks text still to be written in the
// byte-level alphabet: ByteLevel defers that mapping so that the model can look
// the raw text up in its cache first.
type word struct {
	text      string
	first     bool
	byteLevel bool
}

// mapped returns w with any deferred byte-level mapping done.
func (w word) mapped() word {
	if w.byteLevel {
		w.text, w.byteLevel = byteLevelString(w.text), false
	}
	return w
}

// A preTokenizer splits a word into smaller words (and may rewrite them, as
// ByteLevel does), passing each to emit in order. Words flow through the
// pipeline one at a time, so no list of all words is ever built.
type preTokenizer interface {
	preTokenize(w word, emit func(word)) error
}

type splitBehavior uint8

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch strings.ToLower(s) {
	case "removed":
		return behaviorRemoved, nil
	case "isolated":
		return behaviorIsolated, nil
	case "mergedwithprevious":
		return behaviorMergedWithPrevious, nil
	case "mergedwithnext":
		return behaviorMergedWithNext, nil
	case "contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", s)
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType("pre_tokenizer", raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var c struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		var seq preTokenizerSequence
		for _, r := range c.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "Split":
		var c struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		m, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return &splitPre{pattern: m, behavior: b, invert: c.Invert}, nil
	case "ByteLevel":
		c := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		return byteLevelPre{addPrefixSpace: c.AddPrefixSpace, useRegex: c.UseRegex}, nil
	case "Metaspace":
		return parseMetaspace(raw)
	case "Digits":
		var c struct {
			Individual bool `json:"individual_digits"`
		}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		b := behaviorContiguous
		if c.Individual {
			b = behaviorIsolated
		}
		return &predicateSplit{is: unicode.IsNumber, behavior: b}, nil
	case "Punctuation":
		c := struct {
			Behavior string `json:"behavior"`
		}{Behavior: "Isolated"}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		return &predicateSplit{is: isPunctuation, behavior: b}, nil
	case "CharDelimiterSplit":
		var c struct {
			Delimiter string `json:"delimiter"`
		}
		if err := decodeFields("pre_tokenizer", typ, raw, &c); err != nil {
			return nil, err
		}
		d, n := utf8.DecodeRuneInString(c.Delimiter)
		if n == 0 || n != len(c.Delimiter) {
			return nil, fmt.Errorf("pre_tokenizer CharDelimiterSplit: delimiter %q is not one character", c.Delimiter)
		}
		return &predicateSplit{is: func(r rune) bool { return r == d }, behavior: behaviorRemoved}, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return &predicateSplit{is: unicode.IsSpace, behavior: behaviorRemoved}, nil
	case "BertPreTokenizer":
		return preTokenizerSequence{
			&predicateSplit{is: unicode.IsSpace, behavior: behaviorRemoved},
			&predicateSplit{is: isPunctuation, behavior: behaviorIsolated},
		}, nil
	}
	return nil, fmt.Errorf("pre_tokenizer: unsupported type %q", typ)
}

type preTokenizerSequence []preTokenizer

func (seq preTokenizerSequence) preTokenize(w word, emit func(word)) error {
	if len(seq) == 0 {
		emit(w)
		return nil
	}
	// Chain the stages: each stage's emit feeds the next. A failure inside a
	// later stage is kept and reported once the first stage returns.
	var err error
	next := emit
	for i := len(seq) - 1; i > 0; i-- {
		p, after := seq[i], next
		next = func(w word) {
			if err == nil {
				err = p.preTokenize(w, after)
			}
		}
	}
	if e := seq[0].preTokenize(w, next); e != nil {
		return e
	}
	return err
}

// span is a stretch of a word, either a match of the splitting pattern (a
// delimiter) or the text between matches.
type span struct {
	start, end int
	match      bool
}

// spansOf covers s with the matches of m and the gaps between them.
func spansOf(dst []span, s string, m matcher) ([]span, error) {
	prev := 0
	err := m.find(s, func(start, end int) {
		if prev < start {
			dst = append(dst, span{prev, start, false})
		}
		dst = append(dst, span{start, end, true})
		prev = end
	})
	if prev < len(s) {
		dst = append(dst, span{prev, len(s), false})
	}
	return dst, err
}

// applyBehavior decides what happens to delimiters: dropped, kept on their
// own, glued to a neighbour, or glued to each other. It rewrites spans in
// place into the pieces to keep.
func applyBehavior(spans []span, b splitBehavior) []span {
	out := spans[:0]
	switch b {
	case behaviorRemoved:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case behaviorIsolated:
		out = spans
	case behaviorContiguous:
		prevMatch := false
		for _, s := range spans {
			if s.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, s := range spans {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case behaviorMergedWithNext:
		// Walk backwards, gluing each delimiter to the piece after it.
		prevMatch := false
		n := len(spans)
		w := n // the kept pieces fill spans[w:]
		for i := n - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && w < n {
				spans[w].start = s.start
			} else {
				w--
				spans[w] = s
			}
			prevMatch = s.match
		}
		out = append(spans[:0], spans[w:]...)
	}
	return out
}

// emitSpans passes on the non-empty kept pieces of w.
func emitSpans(w word, spans []span, emit func(word)) {
	for _, s := range spans {
		if s.start < s.end {
			emit(word{text: w.text[s.start:s.end], first: w.first && s.start == 0})
		}
	}
}

type splitPre struct {
	pattern  matcher
	behavior splitBehavior
	invert   bool
}

func (p *splitPre) preTokenize(w word, emit func(word)) error {
	w = w.mapped()
	if p.behavior == behaviorIsolated {
		// Every match and every gap is a word: no need to collect spans.
		prev := 0
		err := p.pattern.find(w.text, func(start, end int) {
			if prev < start {
				emit(word{text: w.text[prev:start], first: w.first && prev == 0})
			}
			if start < end {
				emit(word{text: w.text[start:end], first: w.first && start == 0})
			}
			prev = end
		})
		if err != nil {
			return err
		}
		if prev < len(w.text) {
			emit(word{text: w.text[prev:], first: w.first && prev == 0})
		}
		return nil
	}
	spans, err := spansOf(nil, w.text, p.pattern)
	if err != nil {
		return err
	}
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	emitSpans(w, applyBehavior(spans, p.behavior), emit)
	return nil
}

// predicateSplit splits on every character that satisfies is, each one a
// delimiter of its own (Digits, Punctuation, WhitespaceSplit).
type predicateSplit struct {
	is       func(rune) bool
	behavior splitBehavior
}

func (p *predicateSplit) preTokenize(w word, emit func(word)) error {
	w = w.mapped()
	var spans []span
	prev := 0
	for i := 0; i < len(w.text); {
		r, n := utf8.DecodeRuneInString(w.text[i:])
		if p.is(r) {
			if prev < i {
				spans = append(spans, span{prev, i, false})
			}
			spans = append(spans, span{i, i + n, true})
			prev = i + n
		}
		i += n
	}
	if prev < len(w.text) {
		spans = append(spans, span{prev, len(w.text), false})
	}
	emitSpans(w, applyBehavior(spans, p.behavior), emit)
	return nil
}

func isPunctuation(r rune) bool {
	if r < utf8.RuneSelf {
		return '!' <= r && r <= '/' || ':' <= r && r <= '@' || '[' <= r && r <= '`' || '{' <= r && r <= '~'
	}
	return unicode.IsPunct(r)
}

// isWordChar is \w: letters, marks, decimal digits, connector punctuation and
// the zero-width joiners.
func isWordChar(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

// whitespacePre keeps the runs of \w+ and of [^\w\s]+, dropping whitespace.
type whitespacePre struct{}

func (whitespacePre) preTokenize(w word, emit func(word)) error {
	w = w.mapped()
	start, kind := -1, 0 // kind 1: word characters, 2: others
	flush := func(end int) {
		if start >= 0 {
			emit(word{text: w.text[start:end], first: w.first && start == 0})
			start = -1
		}
	}
	for i, r := range w.text {
		k := 2
		switch {
		case isWordChar(r):
			k = 1
		case unicode.IsSpace(r):
			k = 0
		}
		if k != kind || start < 0 {
			flush(i)
			if k != 0 {
				start = i
			}
			kind = k
		}
	}
	flush(len(w.text))
	return nil
}

// byteLevelPre is GPT-2's pre-tokenizer: optionally a leading space, optionally
// the GPT-2 split, then every byte as its printable stand-in rune (deferred:
// see word).
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (p byteLevelPre) preTokenize(w word, emit func(word)) error {
	w = w.mapped()
	text := w.text
	if p.addPrefixSpace && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	if !p.useRegex {
		emit(word{text: text, first: w.first, byteLevel: true})
		return nil
	}
	return gpt2Scanner{}.find(text, func(s, e int) {
		emit(word{text: text[s:e], first: w.first && s == 0, byteLevel: true})
	})
}

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspacePre is sentencepiece's convention: spaces become ▁ (the
// replacement), a ▁ is prepended per prepend_scheme, and words start at each ▁.
type metaspacePre struct {
	replacement string
	scheme      prependScheme
	split       bool
}

func parseMetaspaceConfig(raw json.RawMessage, kind string) (repl string, scheme prependScheme, split bool, err error) {
	c := struct {
		Replacement    string  `json:"replacement"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
	}{Replacement: "▁"}
	if err := decodeFields(kind, "Metaspace", raw, &c); err != nil {
		return "", 0, false, err
	}
	if utf8.RuneCountInString(c.Replacement) != 1 {
		return "", 0, false, fmt.Errorf("%s Metaspace: replacement %q is not one character", kind, c.Replacement)
	}
	scheme = prependAlways
	switch {
	case c.PrependScheme != nil:
		switch *c.PrependScheme {
		case "always":
		case "first":
			scheme = prependFirst
		case "never":
			scheme = prependNever
		default:
			return "", 0, false, fmt.Errorf("%s Metaspace: unknown prepend_scheme %q", kind, *c.PrependScheme)
		}
	case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
		scheme = prependNever
	}
	return c.Replacement, scheme, c.Split == nil || *c.Split, nil
}

func parseMetaspace(raw json.RawMessage) (preTokenizer, error) {
	repl, scheme, split, err := parseMetaspaceConfig(raw, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	return &metaspacePre{replacement: repl, scheme: scheme, split: split}, nil
}

func (p *metaspacePre) preTokenize(w word, emit func(word)) error {
	w = w.mapped()
	text := strings.ReplaceAll(w.text, " ", p.replacement)
	if !strings.HasPrefix(text, p.replacement) &&
		(p.scheme == prependAlways || p.scheme == prependFirst && w.first) {
		text = p.replacement + text
	}
	nw := word{text: text, first: w.first}
	if !p.split {
		emit(nw)
		return nil
	}
	spans, _ := spansOf(nil, text, literalMatcher(p.replacement))
	emitSpans(nw, applyBehavior(spans, behaviorMergedWithNext), emit)
	return nil
}
