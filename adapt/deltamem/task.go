package deltamem

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// Task is the recall task the memory learns and is measured on, built from
// documents: a session first reads a passage of a document (the facts, stated
// early); then the window moves on — the KV cache is reset, the memory is not —
// and the session reads other text and a cue, the few tokens of the passage
// before a fact, and must go on with the fact (asked later). With the window
// reset, the model can only know the answer through the memory.
//
// The fact of a passage is where its rarest token (fewest occurrences in the
// documents) starts the answer: a name, a number, a product — what the
// passage says that the kind of text does not predict. An answer drawn
// anywhere would mostly be function words and boilerplate, which a memory
// could "recall" from any passage of the same kind (see Recall.Control).
type Task struct {
	Fact   int // tokens of the passage read before the window moves on
	Filler int // tokens of another document read after, before the cue
	Cue    int // tokens of the passage repeated as the question
	Answer int // tokens of the fact, scored
}

// DefaultTask is what Train and the tests use: a 16-token passage, then a new
// window that starts with a few tokens (a new turn's template, say) before the
// cue. On the demo model an 8×8 memory trained on it also recalls after 16
// filler tokens; one trained on longer passages and fillers learned mostly a
// prior for the kind of text (the note has the table).
var DefaultTask = Task{Fact: 16, Filler: 4, Cue: 4, Answer: 2}

func (t Task) validate() error {
	if t.Fact < 1 || t.Filler < 0 || t.Cue < 1 || t.Answer < 1 || t.Cue+t.Answer > t.Fact {
		return fmt.Errorf("deltamem: task %+v: want positive lengths and cue + answer within the fact", t)
	}
	return nil
}

// Episode is one session of the task.
type Episode struct {
	Read []int // the passage, read before the window moves on
	Ask  []int // filler, cue, answer: what the window holds when the answer is asked
	// From is the index in Ask of the first answer token: the predictions of
	// Ask[From:] (made at positions From-1 .. len-2) are scored.
	From int
}

// Episodes draws n sessions from docs (token sequences), each passage from a
// random document long enough for it and its filler from another, the fact at
// the passage's rarest token. The same seed draws the same episodes.
func (t Task) Episodes(docs [][]int, n int, seed uint64) ([]Episode, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var long, filler []int // indices of documents that can give a passage, a filler
	for i, d := range docs {
		if len(d) >= t.Fact {
			long = append(long, i)
		}
		if len(d) >= max(t.Filler, 1) {
			filler = append(filler, i)
		}
	}
	if len(long) == 0 || (t.Filler > 0 && len(filler) < 2) {
		return nil, fmt.Errorf("deltamem: task: %d documents, none with the %d tokens a passage needs (or fewer than two for fillers)", len(docs), t.Fact)
	}
	count := map[int]int{}
	for _, d := range docs {
		for _, t := range d {
			count[t]++
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0xfac7))
	out := make([]Episode, n)
	for e := range out {
		di := long[rng.IntN(len(long))]
		d := docs[di]
		o := rng.IntN(len(d) - t.Fact + 1)
		fact := d[o : o+t.Fact]
		s, rarest := 0, math.MaxInt
		for _, c := range rng.Perm(t.Fact - t.Cue - t.Answer + 1) { // ties broken at random
			if n := count[fact[c+t.Cue]]; n < rarest {
				s, rarest = c, n
			}
		}
		ask := make([]int, 0, t.Filler+t.Cue+t.Answer)
		if t.Filler > 0 {
			fi := di
			for fi == di {
				fi = filler[rng.IntN(len(filler))]
			}
			f := docs[fi]
			p := rng.IntN(len(f) - t.Filler + 1)
			ask = append(ask, f[p:p+t.Filler]...)
		}
		ask = append(ask, fact[s:s+t.Cue+t.Answer]...)
		out[e] = Episode{Read: slices.Clone(fact), Ask: ask, From: t.Filler + t.Cue}
	}
	return out, nil
}

// Score is how well answers were recalled.
type Score struct {
	Accuracy float64 // share of answer tokens that are the model's top prediction
	NLL      float64 // mean negative log-likelihood of an answer token, nats
	Tokens   int     // answer tokens scored
}

// Recall compares the ways a session can answer.
type Recall struct {
	Without Score // the window holds only Ask, no memory: what the model guesses
	With    Score // the same window, the memory having read the passage
	// Control is the same window with the memory having read another
	// episode's passage: what the memory gives without the fact (a better
	// prior for the kind of text, say). With − Control is recall.
	Control  Score
	InWindow Score // no memory, the passage still in the window: what the model does when it can see it
	// InWindowWith is the passage in the window and the memory on: what the
	// memory does to a session that has not lost the fact.
	InWindowWith Score
}

// Evaluate scores episodes without and with mem, at chat time's computation
// (no gradients, the memory's chat path), with mem having read the next
// episode's passage instead (the control), and with the passage in the window.
func Evaluate(ctx context.Context, m *inference.Model, mem *Memory, eps []Episode) (Recall, error) {
	var rec Recall
	var acc [5]scoreSum
	for i, ep := range eps {
		if err := ctx.Err(); err != nil {
			return rec, fmt.Errorf("deltamem: evaluate: stopped after %d of %d episodes: %w", i, len(eps), err)
		}
		plain, err := askLogits(m, nil, nil, ep)
		if err != nil {
			return rec, err
		}
		acc[0].add(plain, ep.Ask, ep.From)
		if mem != nil {
			with, err := askLogits(m, mem, ep.Read, ep)
			if err != nil {
				return rec, err
			}
			acc[1].add(with, ep.Ask, ep.From)
			other := eps[(i+1)%len(eps)].Read
			ctl, err := askLogits(m, mem, other, ep)
			if err != nil {
				return rec, err
			}
			acc[3].add(ctl, ep.Ask, ep.From)
			both, err := seenLogits(m, mem, ep)
			if err != nil {
				return rec, err
			}
			acc[4].add(both, ep.Ask, ep.From)
		}
		seen, err := askLogits(m, nil, ep.Read, ep)
		if err != nil {
			return rec, err
		}
		acc[2].add(seen, ep.Ask, ep.From)
	}
	rec.Without, rec.With, rec.InWindow, rec.Control, rec.InWindowWith = acc[0].score(), acc[1].score(), acc[2].score(), acc[3].score(), acc[4].score()
	return rec, nil
}

// askLogits returns the log-probabilities (len(Ask), vocab) of a session that
// answers ep.Ask: with mem, after the memory read read and the KV cache was
// reset; without mem, with read (if any) still in the window before Ask.
func askLogits(m *inference.Model, mem *Memory, read []int, ep Episode) ([]float32, error) {
	c := inference.NewCache(m)
	ask := ep.Ask
	if mem != nil {
		st := mem.NewState()
		if err := mem.Attach(m, c, st); err != nil {
			return nil, err
		}
		ids, err := m.Tokens(read)
		if err != nil {
			return nil, err
		}
		if err := mx.Eval(m.ForwardLast(ids, c)); err != nil {
			return nil, fmt.Errorf("deltamem: read: %w", err)
		}
		c.Reset() // the window moves on; the memory stays
	} else if read != nil {
		ask = slices.Concat(read, ask)
	}
	ids, err := m.Tokens(ask)
	if err != nil {
		return nil, err
	}
	lp := mx.LogSoftmax(m.Forward(ids, c))
	if read != nil && mem == nil {
		lp = mx.SliceAxis(lp, 1, len(read), len(ask))
	}
	out, err := lp.Float32s()
	if err != nil {
		return nil, fmt.Errorf("deltamem: ask: %w", err)
	}
	return out, nil
}

// seenLogits is askLogits of a session that keeps the passage in the window
// with mem on.
func seenLogits(m *inference.Model, mem *Memory, ep Episode) ([]float32, error) {
	c := inference.NewCache(m)
	if err := mem.Attach(m, c, mem.NewState()); err != nil {
		return nil, err
	}
	all := slices.Concat(ep.Read, ep.Ask)
	ids, err := m.Tokens(all)
	if err != nil {
		return nil, err
	}
	out, err := mx.SliceAxis(mx.LogSoftmax(m.Forward(ids, c)), 1, len(ep.Read), len(all)).Float32s()
	if err != nil {
		return nil, fmt.Errorf("deltamem: ask: %w", err)
	}
	return out, nil
}

type scoreSum struct {
	right, n int
	nll      float64
}

// add scores the predictions of ask[from:] in lp (len(ask), vocab).
func (s *scoreSum) add(lp []float32, ask []int, from int) {
	vocab := len(lp) / len(ask)
	for p := from - 1; p < len(ask)-1; p++ {
		row := lp[p*vocab : (p+1)*vocab]
		target := ask[p+1]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if best == target {
			s.right++
		}
		s.nll -= float64(row[target])
		s.n++
	}
}

func (s scoreSum) score() Score {
	if s.n == 0 {
		return Score{Accuracy: math.NaN(), NLL: math.NaN()}
	}
	return Score{Accuracy: float64(s.right) / float64(s.n), NLL: s.nll / float64(s.n), Tokens: s.n}
}
