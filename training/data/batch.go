package data

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

// BatchOptions say how examples are grouped.
type BatchOptions struct {
	BatchSize int // rows per batch
	// MaxSeqLen is the longest row, in positions (L). An example keeps at most
	// MaxSeqLen+1 tokens, since a row of L inputs predicts L next tokens;
	// the rest is cut and counted in Truncation.
	MaxSeqLen int
	PadID     int32
	// PadMultiple rounds L up to a multiple (never past MaxSeqLen), so a
	// backend that compiles per shape sees few shapes; 0 or 1 does not round.
	PadMultiple int
	Shuffle     bool   // batch order differs per epoch, decided by Seed
	Seed        uint64 // with the epoch, fixes the order
	DropLast    bool   // leave out the last batch when it is short
}

// Position is where a Batcher stands: Next returns batch Index of epoch
// Epoch's order. Store it with a checkpoint and Seek to it to resume.
type Position struct {
	Epoch, Index int
}

// Truncation reports what MaxSeqLen and the masks cost.
type Truncation struct {
	Examples      int // examples cut to MaxSeqLen+1 tokens
	TokensDropped int // tokens cut from them
	Longest       int // tokens in the longest example, before cutting
	NoTargets     int // examples left out: nothing to learn (their learned part was cut, or they had none)
	TooShort      int // examples left out: under two tokens
}

func (t Truncation) String() string {
	s := fmt.Sprintf("%d examples cut to fit (%d tokens dropped; longest was %d tokens)", t.Examples, t.TokensDropped, t.Longest)
	if t.NoTargets+t.TooShort > 0 {
		s += fmt.Sprintf("; %d left out with nothing to learn, %d under two tokens", t.NoTargets, t.TooShort)
	}
	return s
}

// Batch is B rows of L positions, flat in row-major order.
type Batch struct {
	B, L    int
	IDs     []int32   // (B, L) input tokens; PadID past each row's length
	Targets []int32   // (B, L) Targets[b,t] = IDs[b,t+1] of the unpadded row, the token to predict
	Mask    []float32 // (B, L) 1 where the target is learned, 0 for prompts and padding
	Lengths []int32   // (B) positions in use per row
	Rows    []int     // (B) index of each row's example in the slice given to NewBatcher
	At      Position  // where this batch sits in the order
}

// Batcher cuts examples to length, groups those of similar length into
// batches (sorted by length, so padding is small; a batch's rows are the same
// every epoch) and hands batches out in a seeded order per epoch. The order of
// epoch e depends only on Seed and e, so resuming at a Position needs no
// replay. Not safe for concurrent use.
type Batcher struct {
	opt        BatchOptions
	ex         []Example // as given
	lens       []int     // tokens kept per example
	batches    [][]int   // rows of each batch, into ex
	trunc      Truncation
	pos        Position
	order      []int // batch order of epoch orderEpoch
	orderEpoch int
}

// NewBatcher groups examples into batches. Examples are kept by reference;
// resuming needs the same examples in the same order.
func NewBatcher(examples []Example, opt BatchOptions) (*Batcher, error) {
	if opt.BatchSize < 1 || opt.MaxSeqLen < 1 || opt.PadMultiple < 0 {
		return nil, fmt.Errorf("data: batch size %d, max sequence length %d, pad multiple %d: want positive sizes", opt.BatchSize, opt.MaxSeqLen, opt.PadMultiple)
	}
	b := &Batcher{opt: opt, ex: examples, lens: make([]int, len(examples)), orderEpoch: -1}
	var keep []int
	for i, e := range examples {
		if len(e.Mask) != len(e.Tokens) {
			return nil, fmt.Errorf("data: example %d (%s): %d tokens but %d mask entries", i, e.Source, len(e.Tokens), len(e.Mask))
		}
		n := len(e.Tokens)
		b.trunc.Longest = max(b.trunc.Longest, n)
		if n > opt.MaxSeqLen+1 {
			b.trunc.Examples++
			b.trunc.TokensDropped += n - (opt.MaxSeqLen + 1)
			n = opt.MaxSeqLen + 1
		}
		b.lens[i] = n
		switch {
		case n < 2:
			b.trunc.TooShort++
		case !slices.Contains(e.Mask[1:n], true):
			b.trunc.NoTargets++
		default:
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return nil, fmt.Errorf("%w to batch (%s)", ErrNoExamples, b.trunc)
	}
	slices.SortStableFunc(keep, func(x, y int) int { return cmp.Compare(b.lens[x], b.lens[y]) })
	for i := 0; i < len(keep); i += opt.BatchSize {
		rows := keep[i:min(i+opt.BatchSize, len(keep))]
		if len(rows) < opt.BatchSize && opt.DropLast && i > 0 {
			break
		}
		b.batches = append(b.batches, rows)
	}
	return b, nil
}

// Len is the number of batches per epoch.
func (b *Batcher) Len() int { return len(b.batches) }

// Truncation reports what was cut and left out.
func (b *Batcher) Truncation() Truncation { return b.trunc }

// Position is where the next batch comes from.
func (b *Batcher) Position() Position { return b.pos }

// Seek moves to p, e.g. a checkpoint's Position.
func (b *Batcher) Seek(p Position) error {
	if p.Epoch < 0 || p.Index < 0 || p.Index > len(b.batches) {
		return fmt.Errorf("data: position %+v outside %d batches per epoch", p, len(b.batches))
	}
	b.pos = p
	return nil
}

// Order is the batch order of an epoch, as indices into the batches sorted
// by length.
func (b *Batcher) Order(epoch int) []int { return slices.Clone(b.orderOf(epoch)) }

func (b *Batcher) orderOf(epoch int) []int {
	if b.orderEpoch != epoch {
		b.order = make([]int, len(b.batches))
		for i := range b.order {
			b.order[i] = i
		}
		if b.opt.Shuffle {
			shuffle(b.order, b.opt.Seed, epoch)
		}
		b.orderEpoch = epoch
	}
	return b.order
}

// Next returns the batch at Position and moves past it, into the next epoch
// after the last.
func (b *Batcher) Next() Batch {
	if b.pos.Index >= len(b.batches) {
		b.pos = Position{Epoch: b.pos.Epoch + 1}
	}
	at := b.pos
	batch := b.build(b.batches[b.orderOf(at.Epoch)[at.Index]])
	batch.At = at
	b.pos.Index++
	return batch
}

func (b *Batcher) build(rows []int) Batch {
	longest := 0
	for _, r := range rows {
		longest = max(longest, b.lens[r]-1)
	}
	L := longest
	if m := b.opt.PadMultiple; m > 1 {
		L = min((L+m-1)/m*m, b.opt.MaxSeqLen)
	}
	B := len(rows)
	bt := Batch{
		B: B, L: L,
		IDs:     make([]int32, B*L),
		Targets: make([]int32, B*L),
		Mask:    make([]float32, B*L),
		Lengths: make([]int32, B),
		Rows:    slices.Clone(rows),
	}
	for i := range bt.IDs {
		bt.IDs[i], bt.Targets[i] = b.opt.PadID, b.opt.PadID
	}
	for i, r := range rows {
		e, n := b.ex[r], b.lens[r]
		row := i * L
		copy(bt.IDs[row:], e.Tokens[:n-1])
		copy(bt.Targets[row:], e.Tokens[1:n])
		for t := 0; t < n-1; t++ {
			if e.Mask[t+1] {
				bt.Mask[row+t] = 1
			}
		}
		bt.Lengths[i] = int32(n - 1)
	}
	return bt
}

// shuffle is Fisher–Yates over a PCG stream: written out here, not taken from
// math/rand, so an order saved in a checkpoint cannot change with the Go
// release that reads it.
func shuffle(p []int, seed uint64, epoch int) {
	r := rand.NewPCG(seed, 0x9e3779b97f4a7c15^uint64(epoch))
	for i := len(p) - 1; i > 0; i-- {
		j := int(r.Uint64() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
}
