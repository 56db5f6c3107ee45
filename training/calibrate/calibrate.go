// Package calibrate makes a classifier's confidence mean what it says: when it
// reports 0.9 it should be right nine times in ten. It fits one temperature per
// question on held-out examples (temperature scaling: softmax(scores/T), with T
// chosen to minimise the negative log-likelihood), and measures what that did:
// accuracy, NLL, Brier score, expected calibration error over equal-width bins,
// the reliability diagram's bins, and a coverage/accuracy table from which a user
// picks the confidence below which a decision goes to a human.
//
// Everything here is float64 over plain slices: held-out sets are small, and the
// numbers must not depend on a compute backend.
package calibrate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultBins is the number of equal-width confidence bins of ECE and the
// reliability diagram.
const DefaultBins = 15

// The temperatures FitTemperature may return. Below MinTemperature the fit is
// chasing a held-out set it separates perfectly (NLL keeps falling as T → 0);
// above MaxTemperature the scores carry no usable signal.
const (
	MinTemperature = 0.05
	MaxTemperature = 20.0
)

// ErrNoExamples is returned for an empty set of examples.
var ErrNoExamples = errors.New("calibrate: no examples")

// Bin is one bar of a reliability diagram: the answers whose confidence falls in
// [Lo, Hi) (the last bin includes 1), how many, their mean confidence and the
// share of them that were right.
type Bin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Count      int     `json:"count"`
	Confidence float64 `json:"confidence"`
	Accuracy   float64 `json:"accuracy"`
}

// Metrics describe one set of probabilistic answers against their labels.
type Metrics struct {
	N        int     `json:"n"`
	Accuracy float64 `json:"accuracy"`
	NLL      float64 `json:"nll"`   // mean −log p(label)
	Brier    float64 `json:"brier"` // mean Σₖ (pₖ − [k = label])²
	ECE      float64 `json:"ece"`   // Σ_b (n_b/N)·|accuracy_b − confidence_b|, DefaultBins bins
	Bins     []Bin   `json:"bins,omitempty"`
}

// Softmax returns softmax(scores/t), computed stably.
func Softmax(scores []float64, t float64) []float64 {
	p := make([]float64, len(scores))
	if len(scores) == 0 {
		return p
	}
	hi := math.Inf(-1)
	for _, s := range scores {
		hi = max(hi, s/t)
	}
	var z float64
	for i, s := range scores {
		p[i] = math.Exp(s/t - hi)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

// check reports scores and labels that do not pair up.
func check(scores [][]float64, labels []int) error {
	if len(scores) == 0 {
		return ErrNoExamples
	}
	if len(scores) != len(labels) {
		return fmt.Errorf("calibrate: %d score rows for %d labels", len(scores), len(labels))
	}
	for i, s := range scores {
		if labels[i] < 0 || labels[i] >= len(s) {
			return fmt.Errorf("calibrate: example %d: label %d outside its %d options", i, labels[i], len(s))
		}
		for _, v := range s {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("calibrate: example %d: score %v", i, v)
			}
		}
	}
	return nil
}

// NLL is the mean negative log-likelihood of the labels under softmax(scores/t).
func NLL(scores [][]float64, labels []int, t float64) float64 {
	var sum float64
	for i, s := range scores {
		hi := math.Inf(-1)
		for _, v := range s {
			hi = max(hi, v/t)
		}
		var z float64
		for _, v := range s {
			z += math.Exp(v/t - hi)
		}
		sum += hi + math.Log(z) - s[labels[i]]/t
	}
	return sum / float64(len(scores))
}

// FitTemperature returns the temperature in [MinTemperature, MaxTemperature]
// that minimises NLL(scores, labels, T). NLL is convex in 1/T, so it has one
// minimum along log T, which a golden-section search finds; a minimum beyond
// either end is clamped to it.
func FitTemperature(scores [][]float64, labels []int) (float64, error) {
	if err := check(scores, labels); err != nil {
		return 1, err
	}
	f := func(logT float64) float64 { return NLL(scores, labels, math.Exp(logT)) }
	lo, hi := math.Log(MinTemperature), math.Log(MaxTemperature)
	phi := (math.Sqrt(5) - 1) / 2
	a, b := hi-phi*(hi-lo), lo+phi*(hi-lo)
	fa, fb := f(a), f(b)
	for range 80 { // the bracket shrinks to 0.618⁸⁰ of 6 in log T
		if fa <= fb {
			hi, b, fb = b, a, fa
			a = hi - phi*(hi-lo)
			fa = f(a)
		} else {
			lo, a, fa = a, b, fb
			b = lo + phi*(hi-lo)
			fb = f(b)
		}
	}
	t := math.Exp((lo + hi) / 2)
	// The ends themselves are candidates: golden section never evaluates them.
	best, bestNLL := t, f(math.Log(t))
	for _, end := range []float64{MinTemperature, MaxTemperature} {
		if v := NLL(scores, labels, end); v < bestNLL {
			best, bestNLL = end, v
		}
	}
	return best, nil
}

// Evaluate scores softmax(scores/t) against labels with DefaultBins bins.
func Evaluate(scores [][]float64, labels []int, t float64) (Metrics, error) {
	if err := check(scores, labels); err != nil {
		return Metrics{}, err
	}
	probs := make([][]float64, len(scores))
	for i, s := range scores {
		probs[i] = Softmax(s, t)
	}
	return EvaluateProbs(probs, labels, DefaultBins), nil
}

// EvaluateProbs scores probabilities against labels; the confidence of an
// answer is its top probability, and the answer is that option (the first on a
// tie).
func EvaluateProbs(probs [][]float64, labels []int, bins int) Metrics {
	m := Metrics{N: len(probs)}
	if m.N == 0 {
		return m
	}
	conf, correct := make([]float64, m.N), make([]bool, m.N)
	for i, p := range probs {
		k := Argmax(p)
		conf[i], correct[i] = p[k], k == labels[i]
		if correct[i] {
			m.Accuracy++
		}
		m.NLL -= math.Log(max(p[labels[i]], 1e-300))
		for j, v := range p {
			y := 0.0
			if j == labels[i] {
				y = 1
			}
			m.Brier += (v - y) * (v - y)
		}
	}
	n := float64(m.N)
	m.Accuracy /= n
	m.NLL /= n
	m.Brier /= n
	m.Bins = ReliabilityBins(conf, correct, bins)
	m.ECE = ECE(m.Bins)
	return m
}

// Argmax is the index of p's largest value, the first on a tie.
func Argmax(p []float64) int {
	k := 0
	for j, v := range p {
		if v > p[k] {
			k = j
		}
	}
	return k
}

// ReliabilityBins sorts answers into n equal-width bins of [0, 1] by confidence
// and returns every bin, empty ones included (Count 0), lowest first.
func ReliabilityBins(conf []float64, correct []bool, n int) []Bin {
	if n < 1 {
		n = DefaultBins
	}
	bins := make([]Bin, n)
	for b := range bins {
		bins[b].Lo, bins[b].Hi = float64(b)/float64(n), float64(b+1)/float64(n)
	}
	for i, c := range conf {
		b := min(max(int(c*float64(n)), 0), n-1)
		bins[b].Count++
		bins[b].Confidence += c
		if correct[i] {
			bins[b].Accuracy++
		}
	}
	for b := range bins {
		if k := float64(bins[b].Count); k > 0 {
			bins[b].Confidence /= k
			bins[b].Accuracy /= k
		}
	}
	return bins
}

// ECE is the expected calibration error of a reliability diagram: the mean gap
// between confidence and accuracy, each bin weighted by its share of answers.
func ECE(bins []Bin) float64 {
	var n int
	for _, b := range bins {
		n += b.Count
	}
	if n == 0 {
		return 0
	}
	var e float64
	for _, b := range bins {
		e += float64(b.Count) / float64(n) * math.Abs(b.Accuracy-b.Confidence)
	}
	return e
}

// CrossFittedECE estimates the ECE that temperature scaling will have on new
// examples: the examples are split into two halves at random (seeded), a
// temperature is fitted on each half and applied to the other, and the ECE is
// measured over the out-of-half probabilities. Fitting and measuring on the same
// examples, as the plain after-calibration ECE does, flatters the fit a little.
func CrossFittedECE(scores [][]float64, labels []int, seed uint64) (float64, error) {
	if err := check(scores, labels); err != nil {
		return math.NaN(), err
	}
	if len(scores) < 4 {
		return math.NaN(), fmt.Errorf("calibrate: %d examples are too few to cross-fit", len(scores))
	}
	perm := rand.New(rand.NewPCG(seed, 0xca11b)).Perm(len(scores))
	half := [2][]int{perm[:len(perm)/2], perm[len(perm)/2:]}
	probs := make([][]float64, len(scores))
	for f := range 2 {
		var s [][]float64
		var l []int
		for _, i := range half[f] {
			s, l = append(s, scores[i]), append(l, labels[i])
		}
		t, err := FitTemperature(s, l)
		if err != nil {
			return math.NaN(), err
		}
		for _, i := range half[1-f] {
			probs[i] = Softmax(scores[i], t)
		}
	}
	return EvaluateProbs(probs, labels, DefaultBins).ECE, nil
}

// CoveragePoint is one row of a coverage/accuracy table: of the answers whose
// confidence is at least Threshold (decided automatically; the rest escalate),
// the share they are of all answers and how accurate they are.
type CoveragePoint struct {
	Threshold float64 `json:"threshold"`
	Coverage  float64 `json:"coverage"`
	Accuracy  float64 `json:"accuracy"` // NaN-free: 0 when nothing is covered
	N         int     `json:"n"`        // answers covered
}

// DefaultThresholds are the rows of the coverage table a report prints.
var DefaultThresholds = []float64{0, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99}

// SliderThresholds are 0, 0.01, …, 1: the coverage table a threshold slider
// reads, DefaultThresholds among them.
var SliderThresholds = func() []float64 {
	ts := make([]float64, 101)
	for i := range ts {
		ts[i] = float64(i) / 100
	}
	return ts
}()

// IsDefaultThreshold reports whether t is one of DefaultThresholds, for
// printing the short table out of the slider's.
func IsDefaultThreshold(t float64) bool {
	for _, d := range DefaultThresholds {
		if math.Abs(d-t) < 1e-9 {
			return true
		}
	}
	return false
}

// Coverage returns the coverage/accuracy table at the given thresholds, sorted.
func Coverage(conf []float64, correct []bool, thresholds []float64) []CoveragePoint {
	ts := slices.Sorted(slices.Values(thresholds))
	out := make([]CoveragePoint, len(ts))
	for j, t := range ts {
		p := CoveragePoint{Threshold: t}
		var right int
		for i, c := range conf {
			if c >= t {
				p.N++
				if correct[i] {
					right++
				}
			}
		}
		if len(conf) > 0 {
			p.Coverage = float64(p.N) / float64(len(conf))
		}
		if p.N > 0 {
			p.Accuracy = float64(right) / float64(p.N)
		}
		out[j] = p
	}
	return out
}

// ThresholdFor returns the lowest threshold of the table whose covered answers
// are at least as accurate as accuracy (the most automation that meets it), and
// false when none is.
func ThresholdFor(table []CoveragePoint, accuracy float64) (float64, bool) {
	for _, p := range table {
		if p.N > 0 && p.Accuracy >= accuracy {
			return p.Threshold, true
		}
	}
	return 0, false
}

// Confidences returns each answer's top probability under softmax(scores/t) and
// whether that answer is the label.
func Confidences(scores [][]float64, labels []int, t float64) (conf []float64, correct []bool) {
	conf, correct = make([]float64, len(scores)), make([]bool, len(scores))
	for i, s := range scores {
		p := Softmax(s, t)
		k := Argmax(p)
		conf[i], correct[i] = p[k], k == labels[i]
	}
	return conf, correct
}
