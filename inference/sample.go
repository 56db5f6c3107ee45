package inference

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	mx "github.com/inloop/inloop/mlxbridge"
)

// SampleOptions chooses how the next token is drawn from the logits. The filters run
// in Hugging Face's order: repetition penalty, temperature, top-k, top-p, min-p; each
// renormalizes what the previous one kept.
type SampleOptions struct {
	Temperature       float64 // 0: greedy (argmax)
	TopK              int     // keep the k most likely tokens (ties with the k-th kept); 0: off
	TopP              float64 // keep the smallest set of most likely tokens with mass ≥ TopP; 0 or 1: off
	MinP              float64 // drop tokens less likely than MinP × the most likely one; 0: off
	RepetitionPenalty float64 // divide positive / multiply negative logits of seen tokens; 0 or 1: off
	RepetitionWindow  int     // how many recent context tokens the penalty looks at; 0: all
	Seed              uint64  // the draws are a PCG stream from this seed
}

// Validate reports options out of range.
func (o SampleOptions) Validate() error {
	switch {
	case !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0):
		return fmt.Errorf("inference: temperature %g, want ≥ 0", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("inference: top-k %d, want ≥ 0", o.TopK)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return fmt.Errorf("inference: top-p %g, want in [0, 1]", o.TopP)
	case !(o.MinP >= 0 && o.MinP <= 1):
		return fmt.Errorf("inference: min-p %g, want in [0, 1]", o.MinP)
	case !(o.RepetitionPenalty >= 0) || math.IsInf(o.RepetitionPenalty, 0):
		return fmt.Errorf("inference: repetition penalty %g, want > 0", o.RepetitionPenalty)
	case o.RepetitionWindow < 0:
		return fmt.Errorf("inference: repetition window %d, want ≥ 0", o.RepetitionWindow)
	}
	return nil
}

// Sampler draws tokens; it keeps its random stream and scratch space between calls.
type Sampler struct {
	o   SampleOptions
	rng *rand.Rand
	z   []float32 // penalized logits
	w   []float64 // unnormalized probability of every token, 0 for the filtered out
	tmp []int     // token ids of one top-p bucket
	bk  []uint16  // each kept token's top-p bucket (see weigh)
	ids *mx.Array // 0 … vocab−1 on the device (deviceIDs)

	back    float64 // the last number a device draw took (uniform, unread)
	hasBack bool
}

// candidate is a token and its probability.
type candidate struct {
	id int
	p  float64
}

// NewSampler returns a sampler for o.
func NewSampler(o SampleOptions) (*Sampler, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x853c49e6748fea9b))}, nil
}

// Sample returns the next token for logits (one row, vocab long), given the tokens
// so far (for the repetition penalty).
func (s *Sampler) Sample(logits []float32, context []int) int {
	z := s.penalize(logits, context)
	if s.o.Temperature == 0 {
		return argmax(z)
	}
	total := s.weigh(z)
	u := s.rng.Float64() * total
	acc, last := 0.0, 0
	for i, w := range s.w {
		if w == 0 {
			continue
		}
		acc += w
		if u < acc {
			return i
		}
		last = i
	}
	return last // u within rounding of the total
}

// penalize applies the repetition penalty to a copy of logits (or returns logits).
func (s *Sampler) penalize(logits []float32, context []int) []float32 {
	pen := float32(s.o.RepetitionPenalty)
	if pen == 0 || pen == 1 || len(context) == 0 {
		return logits
	}
	s.z = append(s.z[:0], logits...)
	if w := s.o.RepetitionWindow; w > 0 && len(context) > w {
		context = context[len(context)-w:]
	}
	for _, t := range context {
		if t < 0 || t >= len(logits) {
			continue
		}
		// From the original value, so a token seen twice is penalized once.
		if v := logits[t]; v < 0 {
			s.z[t] = v * pen
		} else {
			s.z[t] = v / pen
		}
	}
	return s.z
}

func argmax(z []float32) int {
	best := 0
	for i, v := range z {
		if v > z[best] {
			best = i
		}
	}
	return best
}

// negligible: a token this many nats below the best has probability below e⁻⁵⁰ of
// it; dropping all such tokens moves less than vocab·2e-22 of probability mass.
const negligible = 50

// bucketsPerNat sets top-p's histogram resolution (see weigh), and buckets is its
// size: a token d nats below the best is in bucket ⌊d·bucketsPerNat⌋.
const (
	bucketsPerNat = 8
	buckets       = negligible*bucketsPerNat + 1
)

// weigh fills s.w with exp((z − max z)/T) for the tokens that survive top-k, top-p
// and min-p, 0 for the rest, and returns their sum. Nothing is sorted whole: top-k
// keeps a heap of k, and top-p buckets tokens by their distance below the best in
// 1/8 nats (monotone in probability), so only the bucket where the mass crosses p
// needs sorting.
func (s *Sampler) weigh(z []float32) float64 {
	inv := 1 / s.o.Temperature
	zmax := z[argmax(z)]
	cut := float32(math.Inf(-1))
	if k := s.o.TopK; k > 0 && k < len(z) {
		cut = kthLargest(z, k)
	}
	if cap(s.w) < len(z) {
		s.w = make([]float64, len(z))
	}
	s.w = s.w[:len(z)]
	w := s.w
	topP := s.o.TopP > 0 && s.o.TopP < 1
	var bk []uint16
	if topP {
		if cap(s.bk) < len(z) {
			s.bk = make([]uint16, len(z))
		}
		bk = s.bk[:len(z)]
	}
	total := parallelSum(len(z), func(lo, hi int) float64 {
		// Local slices: through s, every store to s.w reloaded it and checked its bounds.
		zs, ws := z[lo:hi], w[lo:hi:hi]
		var bs []uint16
		if topP {
			bs = bk[lo:hi:hi]
		}
		t := 0.0
		for i, v := range zs {
			d := float64(zmax-v) * inv
			if v < cut || d >= negligible {
				ws[i] = 0
				continue
			}
			e := expNeg(d)
			ws[i] = e
			t += e
			if topP {
				bs[i] = uint16(min(int(d*bucketsPerNat), buckets-1))
			}
		}
		return t
	})
	if topP {
		total = s.nucleus(s.o.TopP * total)
	}
	if mp := s.o.MinP; mp > 0 {
		// The best token weighs exp(0) = 1 and survives every filter.
		total = 0
		for i, w := range s.w {
			if w < mp {
				s.w[i] = 0
			}
			total += s.w[i]
		}
	}
	return total
}

// expNeg is e^−d for 0 ≤ d < negligible, within three ulp of math.Exp and faster (a
// vocabulary's weights are most of a sampled token's time): with m = round(64·d/ln 2),
// e^−d = 2^−⌊m/64⌋ · 2^−(m mod 64)/64 · e^−r, where |r| ≤ ln 2/128 and e^−r is its
// Taylor series to r⁵ (truncation below 4e-17 relative). ln 2/64 is in two parts, so
// m·ln 2/64 is exact; the 64 powers are a table.
func expNeg(d float64) float64 {
	const (
		inv   = 64 * 1.44269504088896338700e+00
		ln2hi = 6.93147180369123816490e-01 / 64
		ln2lo = 1.90821492927058770002e-10 / 64
	)
	m := int64(d*inv + 0.5) // d ≥ 0: truncation rounds
	fm := float64(m)
	r := fm*ln2hi - d + fm*ln2lo // −r
	p := ((((r*(1.0/120)+1.0/24)*r+1.0/6)*r+0.5)*r+1)*r + 1
	return p * expNegTable[m&63] * math.Float64frombits(uint64(1023-(m>>6))<<52)
}

// expNegTable holds 2^(−j/64), j < 64.
var expNegTable = func() (t [64]float64) {
	for j := range t {
		t[j] = math.Exp2(-float64(j) / 64)
	}
	return t
}()

// nucleus keeps the most likely tokens while the mass before each is below target
// (so the token that crosses it stays, and always the best one), zeroes the rest of
// s.w and returns the mass kept. It reads the buckets weigh put in s.bk.
func (s *Sampler) nucleus(target float64) float64 {
	var mass [buckets]float64
	ws, bk := s.w, s.bk[:len(s.w)]
	for i, w := range ws {
		if w > 0 {
			mass[bk[i]] += w
		}
	}
	cross, below := 0, 0.0 // the bucket where the mass reaches target, and the mass before it
	for cross < buckets-1 && below+mass[cross] < target {
		below += mass[cross]
		cross++
	}
	s.tmp = s.tmp[:0]
	for i, w := range ws {
		if !(w > 0) { // 0, or NaN from NaN logits: left as they are
			continue
		}
		switch b := int(bk[i]); {
		case b == cross:
			s.tmp = append(s.tmp, i)
		case b > cross:
			ws[i] = 0
		}
	}
	// Most likely first; equal weights in id order, like a stable sort of the vocabulary.
	slices.SortFunc(s.tmp, func(a, b int) int {
		if c := cmp.Compare(s.w[b], s.w[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	kept := below
	for _, i := range s.tmp {
		if kept < target {
			kept += s.w[i]
		} else {
			s.w[i] = 0
		}
	}
	return kept
}

// distribution returns the surviving tokens and their probabilities, in id order.
func (s *Sampler) distribution(z []float32) []candidate {
	total := s.weigh(z)
	var c []candidate
	for i, w := range s.w {
		if w > 0 {
			c = append(c, candidate{i, w / total})
		}
	}
	return c
}

// parallelSum runs f over [0, n) in a few chunks on all cores when n is large, and
// adds up what they return.
func parallelSum(n int, f func(lo, hi int) float64) float64 {
	parts := min(numCPU(), max(1, n/(1<<15)))
	if parts == 1 {
		return f(0, n)
	}
	sums := make([]float64, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { sums[p] = f(n*p/parts, n*(p+1)/parts) })
	}
	wg.Wait()
	total := 0.0
	for _, v := range sums {
		total += v
	}
	return total
}

// kthLargest returns the k-th largest value of z (1 ≤ k < len(z)) with a min-heap.
func kthLargest(z []float32, k int) float32 {
	h := make(minHeap, 0, k)
	for _, v := range z {
		if len(h) < k {
			heap.Push(&h, v)
		} else if v > h[0] {
			h[0] = v
			heap.Fix(&h, 0)
		}
	}
	return h[0]
}

type minHeap []float32

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(float32)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
