package tao

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode"
)

// Item is one answer to score: the user's prompt as sent (no system prompt)
// and a candidate answer.
type Item struct {
	Prompt string
	Answer string
	// Finished reports that the answer ended on its own (a stop token or
	// string), not at the token budget.
	Finished bool
}

// A Reward scores answers, each in [0, 1], higher is better. Score gets a
// batch, so a reward that runs a model scores it in few forward passes.
type Reward interface {
	Name() string
	Score(ctx context.Context, items []Item) ([]float64, error)
}

// Part is one reward of a Combined with its weight.
type Part struct {
	Reward Reward
	Weight float64
}

// Combined is the local reward TAO trains on: the weighted mean of its parts,
//
//	r = Σᵢ wᵢ·rᵢ / Σᵢ wᵢ,
//
// each rᵢ in [0, 1], so r is in [0, 1] and a part's weight is its share of the
// whole whatever the other parts are. Parts with weight 0 are left out. The
// usual parts are a decision-model judge (Judge: the probability that a person
// would call the answer good), the feedback history (History: how the nearest
// rated answers were rated) and the simple checks (Checks: length and
// repetition); NewCombined documents the default weights.
type Combined struct {
	Parts []Part
}

// Default weights of the usual parts: the judge, trained on what people said
// about answers, counts most; the history, a nearest-neighbour vote, less; the
// checks only keep degenerate answers (empty, looping, cut off) down.
const (
	DefaultJudgeWeight   = 0.5
	DefaultHistoryWeight = 0.3
	DefaultChecksWeight  = 0.2
)

// NewCombined is the weighted mean of the given rewards with the default
// weights (a nil judge or history is left out; the others' weights keep their
// ratio): judge 0.5, history 0.3, checks 0.2.
func NewCombined(judge *Judge, history *History, checks Checks) *Combined {
	c := &Combined{}
	if judge != nil {
		c.Parts = append(c.Parts, Part{judge, DefaultJudgeWeight})
	}
	if history != nil {
		c.Parts = append(c.Parts, Part{history, DefaultHistoryWeight})
	}
	c.Parts = append(c.Parts, Part{checks, DefaultChecksWeight})
	return c
}

// Name lists the parts and their weights (a lone part by its own name).
func (c *Combined) Name() string {
	var s, names []string
	for _, p := range c.Parts {
		if p.Weight > 0 {
			s = append(s, fmt.Sprintf("%.2g×%s", p.Weight, p.Reward.Name()))
			names = append(names, p.Reward.Name())
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(s, " + ")
}

// Score is the weighted mean of the parts' scores.
func (c *Combined) Score(ctx context.Context, items []Item) ([]float64, error) {
	total, _, err := c.ScoreParts(ctx, items)
	return total, err
}

// ScoreParts is Score with each part's own scores, by part name.
func (c *Combined) ScoreParts(ctx context.Context, items []Item) ([]float64, map[string][]float64, error) {
	var wsum float64
	for _, p := range c.Parts {
		if !(p.Weight >= 0) || math.IsInf(p.Weight, 0) {
			return nil, nil, fmt.Errorf("tao: reward %s has weight %g", p.Reward.Name(), p.Weight)
		}
		wsum += p.Weight
	}
	if wsum == 0 {
		return nil, nil, errors.New("tao: the combined reward has no part with a positive weight")
	}
	total := make([]float64, len(items))
	parts := map[string][]float64{}
	for _, p := range c.Parts {
		if p.Weight == 0 {
			continue
		}
		s, err := p.Reward.Score(ctx, items)
		if err != nil {
			return nil, nil, err
		}
		if err := checkScores(p.Reward.Name(), s, len(items)); err != nil {
			return nil, nil, err
		}
		parts[p.Reward.Name()] = s
		for i, v := range s {
			total[i] += p.Weight / wsum * v
		}
	}
	return total, parts, nil
}

// checkScores refuses a reward that broke its contract: one score per item,
// each in [0, 1].
func checkScores(name string, s []float64, n int) error {
	if len(s) != n {
		return fmt.Errorf("tao: reward %s gave %d scores for %d answers", name, len(s), n)
	}
	for i, v := range s {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("tao: reward %s gave answer %d the score %g, outside [0, 1]", name, i, v)
		}
	}
	return nil
}

// Checks are the simple checks: an answer's length in words and how much it
// repeats itself. Its score is the product
//
//	length × (1 − repeated) × (0.5 if cut off at the token budget, else 1)
//
// where length is 1 for MinWords..MaxWords words, falling linearly to 0 at no
// words and at 2·MaxWords, and repeated is the share of the answer's word
// trigrams that occurred earlier in it (a looping answer approaches 1). An
// empty answer scores 0.
type Checks struct {
	MinWords int // 0: 1
	MaxWords int // 0: 60
}

// Name is "checks".
func (Checks) Name() string { return "checks" }

// Score applies the checks to each answer.
func (c Checks) Score(_ context.Context, items []Item) ([]float64, error) {
	lo, hi := max(c.MinWords, 1), c.MaxWords
	if hi == 0 {
		hi = 60
	}
	if hi < lo {
		return nil, fmt.Errorf("tao: checks: max words %d below min words %d", hi, lo)
	}
	out := make([]float64, len(items))
	for i, it := range items {
		w := words(it.Answer)
		n := len(w)
		var length float64
		switch {
		case n == 0:
			length = 0
		case n < lo:
			length = float64(n) / float64(lo)
		case n <= hi:
			length = 1
		default:
			length = max(0, 1-float64(n-hi)/float64(hi))
		}
		s := length * (1 - Repetition(w))
		if !it.Finished {
			s *= 0.5
		}
		out[i] = s
	}
	return out, nil
}

// words splits text into lower-cased words of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

// Repetition is the share of the word trigrams of w that occurred earlier in
// w: 0 for text that never repeats three words in a row, near 1 for a loop.
func Repetition(w []string) float64 {
	if len(w) < 3 {
		return 0
	}
	seen := map[[3]string]bool{}
	repeated := 0
	for i := 0; i+3 <= len(w); i++ {
		k := [3]string{w[i], w[i+1], w[i+2]}
		if seen[k] {
			repeated++
		}
		seen[k] = true
	}
	return float64(repeated) / float64(len(w)-2)
}

// Format is a known reward: 1 when the answer matches a regular expression,
// else 0 — "answers must follow this format", checked exactly.
type Format struct {
	Pattern *regexp.Regexp
}

// NewFormat compiles pattern (Go's regexp syntax).
func NewFormat(pattern string) (*Format, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("tao: format %q: %w", pattern, err)
	}
	return &Format{Pattern: re}, nil
}

// Name is "format".
func (f *Format) Name() string { return "format" }

// Score is 1 for each answer the pattern matches, else 0.
func (f *Format) Score(_ context.Context, items []Item) ([]float64, error) {
	out := make([]float64, len(items))
	for i, it := range items {
		if f.Pattern.MatchString(it.Answer) {
			out[i] = 1
		}
	}
	return out, nil
}
