package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Added tokens (special tokens such as <|im_start|>, and others a model was
// extended with) are found in the text before the model runs and are never
// split. Those marked normalized=false are matched in the raw text, the others
// in the normalized text. At each position the longest token wins, the
// leftmost position first.

type addedToken struct {
	id         int
	content    string
	special    bool
	lstrip     bool // swallow whitespace to the left
	rstrip     bool // swallow whitespace to the right
	singleWord bool // only match as a whole word
	normalized bool
}

// trieNode is a byte trie over token contents.
type trieNode struct {
	children map[byte]*trieNode
	token    *addedToken // a token ends here
}

type tokenTrie struct {
	root      trieNode
	firstByte [256]bool // bytes a token can start with, to skip ahead fast
	empty     bool
}

func newTokenTrie() *tokenTrie { return &tokenTrie{empty: true} }

func (t *tokenTrie) add(content string, tok *addedToken) {
	if content == "" {
		return
	}
	t.empty = false
	t.firstByte[content[0]] = true
	n := &t.root
	for i := 0; i < len(content); i++ {
		c := n.children[content[i]]
		if c == nil {
			if n.children == nil {
				n.children = make(map[byte]*trieNode)
			}
			c = &trieNode{}
			n.children[content[i]] = c
		}
		n = c
	}
	if n.token == nil { // the first token with this content wins
		n.token = tok
	}
}

// longestAt returns the longest token that s[i:] starts with.
func (t *tokenTrie) longestAt(s string, i int) (*addedToken, int) {
	var best *addedToken
	end := 0
	n := &t.root
	for j := i; j < len(s); j++ {
		if n = n.children[s[j]]; n == nil {
			break
		}
		if n.token != nil {
			best, end = n.token, j+1
		}
	}
	return best, end
}

// section is a stretch of input: an added token (tok != nil) or plain text.
type section struct {
	text  string
	tok   *addedToken
	start int // byte offset in the text that was split
}

// split cuts s at the tokens of t, appending the sections to dst.
func (t *tokenTrie) split(dst []section, s string) []section {
	if t.empty {
		return append(dst, section{text: s})
	}
	last := 0 // end of the previous section
	for i := 0; i < len(s); {
		if !t.firstByte[s[i]] {
			i++
			continue
		}
		tok, end := t.longestAt(s, i)
		if tok == nil {
			i++
			continue
		}
		start := i
		if tok.singleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[end:])) {
			i = end // a discarded match is plain text; the search goes on after it
			continue
		}
		if tok.lstrip {
			for start > last {
				r, w := utf8.DecodeLastRuneInString(s[last:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if tok.rstrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		if last < start {
			dst = append(dst, section{text: s[last:start], start: last})
		}
		dst = append(dst, section{text: s[start:end], tok: tok, start: start})
		last, i = end, end
	}
	if last < len(s) {
		dst = append(dst, section{text: s[last:], start: last})
	}
	return dst
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
