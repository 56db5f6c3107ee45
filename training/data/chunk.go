package data

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"time"
)

// ChunkOptions say how documents become training sequences.
type ChunkOptions struct {
	Size    int // tokens per chunk at most; 0 means 512
	Overlap int // tokens each chunk shares with the next; must be below Size
	// Prefix goes before every chunk's tokens in its Example, e.g. the model's
	// BOS; chunks themselves hold only document tokens.
	Prefix       []int
	MaxFileBytes int64 // larger documents are skipped; 0 means 128 MiB
	// RowsPerChunk caps the table rows (CSV, spreadsheets) one chunk holds;
	// 0 means 50.
	RowsPerChunk int
	// FileTimeout bounds reading one document; 0 means 2 minutes.
	FileTimeout time.Duration
	// Workers read documents in parallel; 0 means one per CPU.
	Workers int
}

// DefaultChunkOptions is a reasonable start for a small model.
var DefaultChunkOptions = ChunkOptions{Size: 512, Overlap: 64}

func (o ChunkOptions) withDefaults() (ChunkOptions, error) {
	if o.Size == 0 {
		o.Size = 512
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 128 << 20
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Size < 1 || o.Overlap < 0 || o.Overlap >= o.Size {
		return o, fmt.Errorf("data: chunk size %d with overlap %d: want 0 <= overlap < size", o.Size, o.Overlap)
	}
	return o, nil
}

// Break strengths, weakest first: a chunk ends at the strongest break near
// its token budget.
const (
	breakNone uint8 = iota
	breakSentence
	breakLine
	breakParagraph
)

// textBreak is a place in the text where a chunk may end: before pos.
type textBreak struct {
	pos      int
	strength uint8
}

// textBreaks finds paragraph, line and sentence ends. Newlines stay with the
// text before them and spaces go with the text after, so a chunk ends with
// "\n\n" or "." and the next starts with a word or " word".
func textBreaks(s string) []textBreak {
	var out []textBreak
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			// A run of whitespace holding newlines breaks after its last newline.
			j, last, lines := i, i, 0
			for ; j < len(s) && isSpace(s[j]); j++ {
				if s[j] == '\n' {
					last = j
					lines++
				}
			}
			if i > 0 && last+1 < len(s) {
				st := breakLine
				if lines >= 2 {
					st = breakParagraph
				}
				out = append(out, textBreak{last + 1, st})
			}
			i = last
		case c == '.' || c == '!' || c == '?':
			j := i + 1
			for j < len(s) && (s[j] == '"' || s[j] == '\'' || s[j] == ')' || s[j] == ']') {
				j++
			}
			if j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				out = append(out, textBreak{j, breakSentence})
			}
		}
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\v' }

// tokenizeWithBreaks encodes a document and marks, for each token, the
// strength of a break just before it (breaks[0] is unused).
func tokenizeWithBreaks(tok Tokenizer, text string) (ids []int32, breaks []uint8, err error) {
	tb := textBreaks(text)
	if ot, ok := tok.(OffsetTokenizer); ok {
		raw, starts, err := ot.EncodeOffsets(text)
		if err != nil {
			return nil, nil, err
		}
		if len(starts) != len(raw) {
			return nil, nil, fmt.Errorf("tokenizer gave %d offsets for %d tokens", len(starts), len(raw))
		}
		if ids, err = toInt32(raw); err != nil {
			return nil, nil, err
		}
		breaks = make([]uint8, len(ids))
		for _, b := range tb {
			i := sort.SearchInts(starts, b.pos) // first token starting at or after the break
			if i > 0 && i < len(breaks) {
				breaks[i] = max(breaks[i], b.strength)
			}
		}
		return ids, breaks, nil
	}
	prev, pending := 0, breakNone
	for k := 0; k <= len(tb); k++ {
		end, st := len(text), breakNone
		if k < len(tb) {
			end, st = tb[k].pos, tb[k].strength
		}
		raw, err := tok.Encode(text[prev:end], false)
		if err != nil {
			return nil, nil, err
		}
		piece, err := toInt32(raw)
		if err != nil {
			return nil, nil, err
		}
		if len(piece) > 0 {
			if len(ids) > 0 {
				breaks = append(breaks, pending)
			} else {
				breaks = append(breaks, breakNone)
			}
			breaks = append(breaks, make([]uint8, len(piece)-1)...)
			ids = append(ids, piece...)
			pending = breakNone
		}
		pending = max(pending, st)
		prev = end
	}
	return ids, breaks, nil
}

// span is a chunk's tokens [start, end) within its document.
type span struct{ start, end int }

// chunkSpans cuts n tokens into chunks of at most size tokens, each sharing
// exactly overlap tokens with the next. A chunk ends at the strongest break
// in the second half of its fresh tokens (the latest, among equals), or at
// exactly size tokens when there is none, so the stride is size-overlap
// unless a break shortens it.
func chunkSpans(n int, breaks []uint8, size, overlap int) []span {
	var out []span
	for start := 0; start < n; {
		if n-start <= size {
			return append(out, span{start, n})
		}
		end := start + size
		lo := start + overlap + (size-overlap+1)/2
		best, bestStrength := end, breakNone
		for e := end; e >= lo; e-- {
			if breaks[e] > bestStrength {
				best, bestStrength = e, breaks[e]
			}
		}
		out = append(out, span{start, best})
		start = best - overlap
	}
	return out
}

// Chunk is a piece of a document, one training sequence.
type Chunk struct {
	ID     string // File + "#" + Index: the same for the same file and place
	File   string // relative to the corpus root, slash-separated
	Index  int
	Tokens []int32 // document tokens only; shared, do not modify
}

// chunkDocument tokenizes a document's text and cuts it into chunks.
func chunkDocument(tok Tokenizer, rel, text string, opt ChunkOptions) ([]Chunk, error) {
	ids, breaks, err := tokenizeWithBreaks(tok, text)
	if err != nil {
		return nil, fmt.Errorf("tokenize %q: %w", rel, err)
	}
	if len(ids) == 0 {
		return nil, errEmptyDocument
	}
	spans := chunkSpans(len(ids), breaks, opt.Size, opt.Overlap)
	chunks := make([]Chunk, len(spans))
	for i, s := range spans {
		chunks[i] = Chunk{ID: fmt.Sprintf("%s#%d", rel, i), File: rel, Index: i, Tokens: ids[s.start:s.end:s.end]}
	}
	return chunks, nil
}

// chunkSections chunks each section of a document on its own, so no chunk
// spans two, and numbers the chunks through the whole document.
func chunkSections(tok Tokenizer, rel string, sections []string, opt ChunkOptions) ([]Chunk, error) {
	var out []Chunk
	for _, s := range sections {
		chunks, err := chunkDocument(tok, rel, s, opt)
		if errors.Is(err, errEmptyDocument) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, c := range chunks {
			c.Index = len(out)
			c.ID = fmt.Sprintf("%s#%d", rel, c.Index)
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, errEmptyDocument
	}
	return out, nil
}

var errEmptyDocument = errors.New("no text")
