package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpeModel is the BPE model of tokenizer.json: a word starts as one symbol per
// character and the pair with the lowest merge rank is merged, leftmost first,
// until no pair has a rank. Merges are keyed by token ids, so the loop compares
// integers, never strings.
type bpeModel struct {
	vocab        map[string]int
	merges       map[uint64]mergeRule // by leftID<<32 | rightID
	unk          int                  // -1 when there is no unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	byteIDs      [256]int32
	smallRunes   [0x180]int32 // ids of one-rune tokens for small runes, -1 if none
	cache        *wordCache   // by word text
	rawCache     *wordCache   // by word text before the byte-level mapping

	// metaspaceChunks is set when no token has ▁ after another character, so
	// no merge can join a character to a following ▁: a word may then be
	// encoded in chunks that each start at such a ▁, with the same result.
	metaspaceChunks bool
}

type mergeRule struct {
	rank int32
	id   int32 // the merged token
}

// wordCacheSize is the number of words per cache generation.
const wordCacheSize = 1 << 14

// maxVocab bounds token ids read from a file: ids index slices.
const maxVocab = 1 << 24

func newBPE(m *modelJSON) (*bpeModel, error) {
	b := &bpeModel{
		vocab:        m.Vocab,
		merges:       make(map[uint64]mergeRule, len(m.Merges)),
		unk:          -1,
		fuseUnk:      m.FuseUnk,
		byteFallback: m.ByteFallback,
		ignoreMerges: m.IgnoreMerges,
		cache:        newWordCache(wordCacheSize),
		rawCache:     newWordCache(wordCacheSize),
	}
	if b.vocab == nil {
		b.vocab = map[string]int{}
	}
	for tok, id := range b.vocab {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("model: token %q has id %d, want 0..%d", tok, id, maxVocab-1)
		}
	}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := b.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		b.unk = id
	}
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		if id, ok := b.vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteIDs[i] = int32(id)
		}
	}
	for r := range b.smallRunes {
		b.smallRunes[r] = -1
		if id, ok := b.vocab[string(rune(r))]; ok {
			b.smallRunes[r] = int32(id)
		}
	}
	if _, ok := b.vocab[metaspace]; ok && b.prefix == "" && b.suffix == "" && !b.ignoreMerges {
		b.metaspaceChunks = true
		for tok := range b.vocab {
			if strings.Contains(strings.TrimLeft(tok, metaspace), metaspace) {
				b.metaspaceChunks = false
				break
			}
		}
	}
	for rank, mg := range m.Merges {
		a, okA := b.vocab[mg[0]]
		c, okC := b.vocab[mg[1]]
		if !okA || !okC {
			return nil, fmt.Errorf("model: merge %d (%q %q) uses a token not in the vocabulary", rank, mg[0], mg[1])
		}
		merged := mg[0] + mg[1]
		if len(b.prefix) > 0 && len(mg[1]) >= len(b.prefix) && mg[1][:len(b.prefix)] == b.prefix {
			merged = mg[0] + mg[1][len(b.prefix):]
		}
		id, ok := b.vocab[merged]
		if !ok {
			return nil, fmt.Errorf("model: merge %d (%q %q) makes %q, which is not in the vocabulary", rank, mg[0], mg[1], merged)
		}
		key := uint64(a)<<32 | uint64(c)
		if _, dup := b.merges[key]; !dup { // the first rank of a repeated rule wins
			b.merges[key] = mergeRule{int32(rank), int32(id)}
		}
	}
	return b, nil
}

// encodeWord appends the ids of one pre-tokenized word.
func (b *bpeModel) encodeWord(dst []int, w word) []int {
	switch {
	case w.text == "":
		return dst
	case w.byteLevel:
		// Most words were seen before: look up the raw text, map only on a miss.
		if ids, ok := b.rawCache.get(w.text); ok {
			return append(dst, ids...)
		}
		start := len(dst)
		dst = b.encodeUncached(dst, byteLevelString(w.text))
		b.rawCache.put(w.text, dst[start:])
		return dst
	case b.metaspaceChunks:
		// A sentencepiece-style model without a pre-tokenizer sees whole texts
		// as one word; cut it where no merge can reach across (see newBPE).
		text := w.text
		for len(text) > 0 {
			end := metaspaceChunkEnd(text)
			dst = b.encodeCached(dst, text[:end])
			text = text[end:]
		}
		return dst
	}
	return b.encodeCached(dst, w.text)
}

func (b *bpeModel) encodeCached(dst []int, text string) []int {
	if ids, ok := b.cache.get(text); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = b.encodeUncached(dst, text)
	b.cache.put(text, dst[start:])
	return dst
}

func (b *bpeModel) encodeUncached(dst []int, text string) []int {
	if b.ignoreMerges {
		if id, ok := b.vocab[text]; ok {
			return append(dst, id)
		}
	}
	return b.mergeWord(dst, text)
}

const metaspace = "\u2581" // ▁

// metaspaceChunkEnd returns where the first chunk of text ends: before the
// first ▁ that follows something other than ▁.
func metaspaceChunkEnd(text string) int {
	for i := 1; i < len(text); {
		j := strings.Index(text[i:], metaspace)
		if j < 0 {
			break
		}
		i += j
		if !strings.HasSuffix(text[:i], metaspace) {
			return i
		}
		i += len(metaspace)
	}
	return len(text)
}

func (b *bpeModel) clearCache() {
	b.cache = newWordCache(wordCacheSize)
	b.rawCache = newWordCache(wordCacheSize)
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
}

// mergeWord runs the merge loop. Words of a few symbols take a direct scan for
// the best pair; longer ones a heap of candidate pairs, O(n log n).
func (b *bpeModel) mergeWord(dst []int, word string) []int {
	var buf [32]symbol
	syms := b.initialSymbols(buf[:0], word)
	if len(syms) > 1 {
		if len(syms) <= smallWord {
			syms = b.mergeSmall(syms)
		} else {
			syms = b.mergeHeap(syms)
		}
	}
	for i := 0; i >= 0 && i < len(syms); i = int(syms[i].next) {
		dst = append(dst, int(syms[i].id))
	}
	return dst
}

// smallWord is the symbol count up to which mergeSmall is used.
var smallWord = 12

// initialSymbols splits word into characters and looks each up, with the
// continuing-subword prefix on all but the first and the end-of-word suffix on
// the last. A character outside the vocabulary becomes its byte tokens
// (byte_fallback), else unk (fused with a preceding unk under fuse_unk), else
// is dropped.
func (b *bpeModel) initialSymbols(syms []symbol, word string) []symbol {
	add := func(id int32) {
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	lastUnk := false
	for i := 0; i < len(word); {
		r, w := utf8.DecodeRuneInString(word[i:])
		id := int32(-1)
		if b.prefix == "" && b.suffix == "" {
			if r < rune(len(b.smallRunes)) {
				id = b.smallRunes[r]
			} else if v, ok := b.vocab[word[i:i+w]]; ok {
				id = int32(v)
			}
		} else {
			tok := word[i : i+w]
			if i > 0 {
				tok = b.prefix + tok
			}
			if i+w == len(word) {
				tok += b.suffix
			}
			if v, ok := b.vocab[tok]; ok {
				id = int32(v)
			}
		}
		if id < 0 && b.byteFallback {
			ok := true
			for k := i; k < i+w; k++ {
				ok = ok && b.byteIDs[word[k]] >= 0
			}
			if ok {
				for k := i; k < i+w; k++ {
					add(b.byteIDs[word[k]])
				}
				lastUnk = false
				i += w
				continue
			}
		}
		switch {
		case id >= 0:
			add(id)
			lastUnk = false
		case b.unk >= 0 && !(b.fuseUnk && lastUnk):
			add(int32(b.unk))
			lastUnk = true
		}
		i += w
	}
	if n := len(syms); n > 0 {
		syms[n-1].next = -1
	}
	return syms
}

func (b *bpeModel) rule(left, right int32) (mergeRule, bool) {
	r, ok := b.merges[uint64(left)<<32|uint64(right)]
	return r, ok
}

// mergeSmall repeatedly merges the best pair found by a scan of the list.
func (b *bpeModel) mergeSmall(syms []symbol) []symbol {
	for {
		best, bestRule := int32(-1), mergeRule{rank: -1}
		for i := int32(0); i >= 0 && syms[i].next >= 0; i = syms[i].next {
			if r, ok := b.rule(syms[i].id, syms[syms[i].next].id); ok && (best < 0 || r.rank < bestRule.rank) {
				best, bestRule = i, r
			}
		}
		if best < 0 {
			return syms
		}
		mergeAt(syms, best, bestRule.id)
	}
}

// mergeAt replaces syms[i] and its successor with the merged token id.
func mergeAt(syms []symbol, i int32, id int32) {
	right := syms[i].next
	syms[i].id = id
	syms[i].next = syms[right].next
	if n := syms[right].next; n >= 0 {
		syms[n].prev = i
	}
	syms[right].id = -1 // dead
}

// candidate is a pair that may be merged: valid while syms[pos] still holds
// left and its successor still holds right. Merged tokens only grow, so a
// symbol never holds an id it held before, and stale entries are recognised.
type candidate struct {
	rank        int32
	pos         int32
	left, right int32
	merged      int32
}

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

func (b *bpeModel) mergeHeap(syms []symbol) []symbol {
	h := make(pairHeap, 0, len(syms))
	push := func(i int32) {
		j := syms[i].next
		if j < 0 {
			return
		}
		if r, ok := b.rule(syms[i].id, syms[j].id); ok {
			h.push(candidate{rank: r.rank, pos: i, left: syms[i].id, right: syms[j].id, merged: r.id})
		}
	}
	for i := range syms {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		next := syms[c.pos].next
		if syms[c.pos].id != c.left || next < 0 || syms[next].id != c.right {
			continue
		}
		mergeAt(syms, c.pos, c.merged)
		if p := syms[c.pos].prev; p >= 0 {
			push(p)
		}
		push(c.pos)
	}
	return syms
}

// pairHeap is a binary min-heap of candidates.
type pairHeap []candidate

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if r < n && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
