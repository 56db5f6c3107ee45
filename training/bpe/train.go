// Package bpe trains byte-level BPE tokenizers, the kind GPT-2 and Hugging
// Face's ByteLevel BPE trainer make, and writes them as tokenizer.json and
// tokenizer_config.json that inference/tokenizer (and Hugging Face's
// libraries) load.
//
// Text is cut at special tokens, split into words with the GPT-2 pattern and
// written as bytes. The trainer counts the distinct words, then repeatedly
// merges the most frequent adjacent pair of tokens into a new token. Pair
// counts are updated incrementally: an index from each pair to the words that
// hold it limits a merge to the words it changes, and a max-heap with lazy
// deletion finds the next pair.
//
// Vocabulary layout: ids 0..255 are the 256 bytes in GPT-2's order, then one
// token per merge in merge order, then the special tokens in the order given.
package bpe

import (
	"errors"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Options control training.
type Options struct {
	// VocabSize is the size of the vocabulary to reach, special tokens
	// included: 256 byte tokens, VocabSize-256-len(SpecialTokens) merged
	// tokens, then the special tokens. Training stops early when no pair is
	// frequent enough.
	VocabSize int
	// MinFrequency is the least number of times a pair must occur to be
	// merged; 0 means 2.
	MinFrequency int
	// SpecialTokens, such as "<|endoftext|>", "<|im_start|>", "<|im_end|>",
	// get the last ids. In the training text they are cut out, never split
	// or merged with their surroundings.
	SpecialTokens []string
	// MaxTokenBytes caps the length of a merged token in bytes; 0: no cap.
	MaxTokenBytes int
	// BOSToken, EOSToken and PadToken name special tokens for
	// tokenizer_config.json. Empty BOSToken: none. Empty EOSToken:
	// "<|endoftext|>" if it is special, else the first special token, else
	// none. Empty PadToken: the EOS token.
	BOSToken, EOSToken, PadToken string
	// ModelMaxLength is written to tokenizer_config.json when above 0.
	ModelMaxLength int
	// Workers is the number of goroutines counting words; 0: GOMAXPROCS.
	Workers int
}

// Stats describe a training run.
type Stats struct {
	Texts         int           // texts read
	Bytes         int64         // bytes of text, special tokens excluded
	Words         int64         // pre-tokenized words
	DistinctWords int           // distinct words
	Merges        int           // merge rules learned
	LastCount     int64         // occurrences of the last merged pair
	Tokens        int64         // tokens of the training text at the end (special tokens excluded)
	CountTime     time.Duration // reading and counting
	MergeTime     time.Duration // merging
}

// Result is a trained tokenizer.
type Result struct {
	// Vocab holds the tokens by id: bytes and merged tokens in the
	// byte-level alphabet ("Ġthe"), then the special tokens as written.
	Vocab []string
	// Merges are the merge rules in rank order, in the byte-level alphabet.
	Merges [][2]string
	// NumSpecial is the number of special tokens, the last ids of Vocab.
	NumSpecial int
	Stats      Stats

	bos, eos, pad  string
	modelMaxLength int
}

// SpecialID returns the id of a special token.
func (r *Result) SpecialID(tok string) (int, bool) {
	for id := len(r.Vocab) - r.NumSpecial; id < len(r.Vocab); id++ {
		if r.Vocab[id] == tok {
			return id, true
		}
	}
	return 0, false
}

// TrainStrings is Train over a slice of texts.
func TrainStrings(texts []string, opts Options) (*Result, error) {
	return Train(slices.Values(texts), opts)
}

// Train learns a byte-level BPE tokenizer from texts. Texts are independent:
// no word spans two of them. The result depends only on the texts' contents
// and opts, not on their batching or the number of workers.
func Train(texts iter.Seq[string], opts Options) (*Result, error) {
	if err := checkOptions(&opts); err != nil {
		return nil, err
	}
	start := time.Now()
	counts, st := countWords(texts, opts.SpecialTokens, opts.Workers)
	st.CountTime = time.Since(start)

	start = time.Now()
	tr := newTrainer(counts, opts)
	counts = nil
	tr.run(opts.VocabSize - len(opts.SpecialTokens))
	st.MergeTime = time.Since(start)
	st.DistinctWords = len(tr.words)
	st.Merges = len(tr.merges)
	st.LastCount = tr.lastCount
	for _, w := range tr.words {
		st.Tokens += int64(len(w.syms)) * w.count
	}
	st.Tokens += tr.singles

	r := &Result{NumSpecial: len(opts.SpecialTokens), Stats: st,
		bos: opts.BOSToken, eos: opts.EOSToken, pad: opts.PadToken, modelMaxLength: opts.ModelMaxLength}
	r.Vocab = append(tr.tokens, opts.SpecialTokens...)
	r.Merges = make([][2]string, len(tr.merges))
	for i, m := range tr.merges {
		r.Merges[i] = [2]string{tr.tokens[m.a], tr.tokens[m.b]}
	}
	return r, nil
}

func checkOptions(o *Options) error {
	if o.MinFrequency <= 0 {
		o.MinFrequency = 2
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MaxTokenBytes < 0 {
		return errors.New("bpe: MaxTokenBytes is negative")
	}
	seen := map[string]bool{}
	for _, s := range o.SpecialTokens {
		switch {
		case s == "":
			return errors.New("bpe: empty special token")
		case !utf8.ValidString(s):
			return fmt.Errorf("bpe: special token %q is not UTF-8", s)
		case seen[s]:
			return fmt.Errorf("bpe: special token %q given twice", s)
		}
		seen[s] = true
	}
	if min := 256 + len(o.SpecialTokens); o.VocabSize < min {
		return fmt.Errorf("bpe: VocabSize %d is below 256 bytes + %d special tokens", o.VocabSize, len(o.SpecialTokens))
	}
	if o.EOSToken == "" {
		if seen["<|endoftext|>"] {
			o.EOSToken = "<|endoftext|>"
		} else if len(o.SpecialTokens) > 0 {
			o.EOSToken = o.SpecialTokens[0]
		}
	}
	if o.PadToken == "" {
		o.PadToken = o.EOSToken
	}
	for _, t := range []struct{ name, tok string }{{"BOSToken", o.BOSToken}, {"EOSToken", o.EOSToken}, {"PadToken", o.PadToken}} {
		if t.tok != "" && !seen[t.tok] {
			return fmt.Errorf("bpe: %s %q is not one of the special tokens", t.name, t.tok)
		}
	}
	return nil
}

// countWords pre-tokenizes the texts on workers goroutines and returns how
// often each word (raw bytes) occurs.
func countWords(texts iter.Seq[string], specials []string, workers int) (map[string]int64, Stats) {
	const batchBytes = 1 << 20
	type result struct {
		counts map[string]*int64
		bytes  int64
		words  int64
	}
	batches := make(chan []string, workers)
	results := make(chan result, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			res := result{counts: map[string]*int64{}}
			for batch := range batches {
				for _, text := range batch {
					if !utf8.ValidString(text) {
						text = strings.ToValidUTF8(text, "\uFFFD")
					}
					splitSpecial(text, specials, func(part string) {
						res.bytes += int64(len(part))
						splitGPT2(part, func(w string) {
							res.words++
							if p := res.counts[w]; p != nil {
								*p++
							} else {
								n := int64(1)
								res.counts[strings.Clone(w)] = &n
							}
						})
					})
				}
			}
			results <- res
		})
	}
	var st Stats
	go func() {
		var batch []string
		size := 0
		for text := range texts {
			st.Texts++
			batch = append(batch, text)
			if size += len(text); size >= batchBytes {
				batches <- batch
				batch, size = nil, 0
			}
		}
		if len(batch) > 0 {
			batches <- batch
		}
		close(batches)
		wg.Wait()
		close(results)
	}()
	var total map[string]int64
	for res := range results {
		st.Bytes += res.bytes
		st.Words += res.words
		if total == nil {
			total = make(map[string]int64, len(res.counts))
		}
		for w, p := range res.counts {
			total[w] += *p
		}
	}
	return total, st
}

type pair struct{ a, b int32 }

func (p pair) key() uint64 { return uint64(uint32(p.a))<<32 | uint64(uint32(p.b)) }

type trainWord struct {
	syms  []int32
	count int64
}

type trainer struct {
	words    []trainWord
	singles  int64    // occurrences of one-byte words, which hold no pair
	tokens   []string // by id, byte-level alphabet
	tokBytes []int    // token lengths in bytes
	byString map[string]int32
	merges   []pair
	merged   map[uint64]int32 // merge rules learned: pair to the merged token

	counts map[uint64]int64   // pair occurrences in the training text
	where  map[uint64][]int32 // words that hold (or once held) each pair
	heap   pairHeap
	stamp  []int32 // per word: the last step that visited it

	minFreq, maxBytes int
	lastCount         int64
}

func newTrainer(counts map[string]int64, opts Options) *trainer {
	tr := &trainer{
		byString: map[string]int32{},
		merged:   map[uint64]int32{},
		counts:   map[uint64]int64{},
		where:    map[uint64][]int32{},
		minFreq:  opts.MinFrequency,
		maxBytes: opts.MaxTokenBytes,
	}
	for id := range 256 {
		tok := byteToToken[idByte[id]]
		tr.tokens = append(tr.tokens, tok)
		tr.tokBytes = append(tr.tokBytes, 1)
		tr.byString[tok] = int32(id)
	}
	// Words in sorted order, so that the run does not depend on map order.
	keys := make([]string, 0, len(counts))
	for w := range counts {
		if len(w) < 2 {
			tr.singles += counts[w]
			continue
		}
		keys = append(keys, w)
	}
	slices.Sort(keys)
	tr.words = make([]trainWord, len(keys))
	tr.stamp = make([]int32, len(keys))
	syms := make([]int32, 0, 64)
	for i, w := range keys {
		syms = syms[:0]
		for j := 0; j < len(w); j++ {
			syms = append(syms, byteID[w[j]])
		}
		c := counts[w]
		tr.words[i] = trainWord{syms: slices.Clone(syms), count: c}
		for j := 0; j+1 < len(syms); j++ {
			k := pair{syms[j], syms[j+1]}.key()
			tr.counts[k] += c
			if l := tr.where[k]; len(l) == 0 || l[len(l)-1] != int32(i) {
				tr.where[k] = append(l, int32(i))
			}
		}
	}
	tr.heap.tokens = tr.tokens
	for k, c := range tr.counts {
		tr.heap.items = append(tr.heap.items, heapItem{c, pairOf(k)})
	}
	tr.heap.init()
	return tr
}

func pairOf(k uint64) pair { return pair{int32(k >> 32), int32(uint32(k))} }

// run merges until the vocabulary (special tokens excluded) has size tokens
// or no pair occurs MinFrequency times.
func (tr *trainer) run(size int) {
	var fresh []uint64 // pairs with the new token, made by this step
	isFresh := map[uint64]bool{}
	for step := int32(1); len(tr.tokens) < size && len(tr.heap.items) > 0; step++ {
		top := tr.heap.pop()
		k := top.p.key()
		cur := tr.counts[k]
		if cur != top.count { // stale: it has lost occurrences since it was pushed
			if cur > 0 {
				tr.heap.push(heapItem{cur, top.p})
			}
			continue
		}
		if cur < int64(tr.minFreq) {
			break
		}
		a, b := top.p.a, top.p.b
		if tr.maxBytes > 0 && tr.tokBytes[a]+tr.tokBytes[b] > tr.maxBytes {
			continue
		}
		// The new token; a pair may spell a token that another pair made,
		// which then keeps its id. A pair merged before may occur again when
		// such a token reappears: its rule exists, so it is applied again
		// without a new rule.
		n, done := tr.merged[k]
		if !done {
			s := tr.tokens[a] + tr.tokens[b]
			var ok bool
			if n, ok = tr.byString[s]; !ok {
				n = int32(len(tr.tokens))
				tr.tokens = append(tr.tokens, s)
				tr.tokBytes = append(tr.tokBytes, tr.tokBytes[a]+tr.tokBytes[b])
				tr.byString[s] = n
				tr.heap.tokens = tr.tokens
			}
			tr.merged[k] = n
			tr.merges = append(tr.merges, top.p)
			tr.lastCount = cur
		}
		fresh = fresh[:0]
		clear(isFresh)
		add := func(p pair, c int64, wi int32) {
			pk := p.key()
			tr.counts[pk] += c
			if l := tr.where[pk]; len(l) == 0 || l[len(l)-1] != wi {
				tr.where[pk] = append(l, wi)
			}
			if !isFresh[pk] {
				isFresh[pk] = true
				fresh = append(fresh, pk)
			}
		}
		for _, wi := range tr.where[k] {
			if tr.stamp[wi] == step {
				continue
			}
			tr.stamp[wi] = step
			w := &tr.words[wi]
			syms, c := w.syms, w.count
			out := syms[:0]
			for i := 0; i < len(syms); {
				if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
					tr.counts[k] -= c
					if len(out) > 0 {
						prev := out[len(out)-1]
						tr.counts[pair{prev, a}.key()] -= c
						add(pair{prev, n}, c, wi)
					}
					if i+2 < len(syms) {
						next := syms[i+2]
						tr.counts[pair{b, next}.key()] -= c
						add(pair{n, next}, c, wi)
					}
					out = append(out, n)
					i += 2
					continue
				}
				out = append(out, syms[i])
				i++
			}
			w.syms = out
		}
		delete(tr.where, k)
		delete(tr.counts, k)
		for _, pk := range fresh {
			if c := tr.counts[pk]; c > 0 {
				tr.heap.push(heapItem{c, pairOf(pk)})
			}
		}
	}
}

// pairHeap is a max-heap of pairs by count; equal counts go to the pair whose
// tokens (left, then right) come first in byte order.
type pairHeap struct {
	items  []heapItem
	tokens []string
}

type heapItem struct {
	count int64
	p     pair
}

func (h *pairHeap) less(i, j int) bool {
	x, y := h.items[i], h.items[j]
	if x.count != y.count {
		return x.count > y.count
	}
	if x.p.a != y.p.a {
		return h.tokens[x.p.a] < h.tokens[y.p.a]
	}
	return h.tokens[x.p.b] < h.tokens[y.p.b]
}

func (h *pairHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(it heapItem) {
	h.items = append(h.items, it)
	for i := len(h.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

func (h *pairHeap) pop() heapItem {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	h.down(0)
	return top
}

func (h *pairHeap) down(i int) {
	for n := len(h.items); ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}
