package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Bins and ECE computed by hand for six answers in 10 bins.
func TestECEHandComputed(t *testing.T) {
	conf := []float64{0.95, 0.92, 0.91, 0.65, 0.62, 0.3}
	correct := []bool{true, true, false, true, false, false}
	bins := ReliabilityBins(conf, correct, 10)
	if len(bins) != 10 {
		t.Fatalf("%d bins, want 10", len(bins))
	}
	// [0.9,1.0): 3 answers, mean conf (0.95+0.92+0.91)/3 = 0.9266…, accuracy 2/3.
	// [0.6,0.7): 2 answers, mean conf 0.635, accuracy 1/2.
	// [0.3,0.4): 1 answer, conf 0.3, accuracy 0.
	want := map[int]Bin{
		9: {Lo: 0.9, Hi: 1, Count: 3, Confidence: 2.78 / 3, Accuracy: 2.0 / 3},
		6: {Lo: 0.6, Hi: 0.7, Count: 2, Confidence: 0.635, Accuracy: 0.5},
		3: {Lo: 0.3, Hi: 0.4, Count: 1, Confidence: 0.3, Accuracy: 0},
	}
	for i, b := range bins {
		w := want[i]
		if w.Count == 0 {
			w.Lo, w.Hi = float64(i)/10, float64(i+1)/10
		}
		if b.Count != w.Count || !near(b.Confidence, w.Confidence, 1e-12) || !near(b.Accuracy, w.Accuracy, 1e-12) ||
			!near(b.Lo, w.Lo, 1e-12) || !near(b.Hi, w.Hi, 1e-12) {
			t.Errorf("bin %d = %+v, want %+v", i, b, w)
		}
	}
	// ECE = 3/6·|2/3 − 0.92666…| + 2/6·|0.5 − 0.635| + 1/6·|0 − 0.3|
	//     = 0.5·0.26 + (1/3)·0.135 + 0.05 = 0.13 + 0.045 + 0.05 = 0.225.
	if got := ECE(bins); !near(got, 0.225, 1e-12) {
		t.Errorf("ECE = %v, want 0.225", got)
	}
	// Confidence 1 belongs to the last bin; 0 to the first.
	b := ReliabilityBins([]float64{1, 0}, []bool{true, false}, DefaultBins)
	if b[DefaultBins-1].Count != 1 || b[0].Count != 1 {
		t.Errorf("confidence 1 and 0: bins %+v", b)
	}
	if ECE(ReliabilityBins(nil, nil, 15)) != 0 {
		t.Error("ECE of nothing is not 0")
	}
}

func TestEvaluateProbs(t *testing.T) {
	probs := [][]float64{{0.7, 0.2, 0.1}, {0.5, 0.5, 0}, {0.1, 0.1, 0.8}}
	labels := []int{0, 1, 0}
	m := EvaluateProbs(probs, labels, 15)
	// Answers: 0 (right), 0 on a tie (wrong), 2 (wrong).
	if m.N != 3 || !near(m.Accuracy, 1.0/3, 1e-12) {
		t.Errorf("N %d accuracy %v, want 3 and 1/3", m.N, m.Accuracy)
	}
	wantNLL := -(math.Log(0.7) + math.Log(0.5) + math.Log(0.1)) / 3
	if !near(m.NLL, wantNLL, 1e-12) {
		t.Errorf("NLL %v, want %v", m.NLL, wantNLL)
	}
	// Brier: (0.09+0.04+0.01) + (0.25+0.25+0) + (0.81+0.01+0.64) = 0.14+0.5+1.46 = 2.1, /3.
	if !near(m.Brier, 0.7, 1e-12) {
		t.Errorf("Brier %v, want 0.7", m.Brier)
	}
}

func TestSoftmaxStable(t *testing.T) {
	p := Softmax([]float64{1000, 1000, -1000}, 1)
	if !near(p[0], 0.5, 1e-12) || !near(p[1], 0.5, 1e-12) || p[2] != 0 {
		t.Errorf("softmax of large scores = %v", p)
	}
	p = Softmax([]float64{2, 0}, 2) // softmax([1, 0])
	if !near(p[0], 1/(1+math.Exp(-1)), 1e-12) {
		t.Errorf("softmax at t=2 = %v", p)
	}
}

// overconfident draws labels from softmax(z) for random scores z, then reports
// the scores multiplied by k: a model whose true temperature is k.
func overconfident(n, classes int, k float64, seed uint64) ([][]float64, []int) {
	r := rand.New(rand.NewPCG(seed, 1))
	scores, labels := make([][]float64, n), make([]int, n)
	for i := range scores {
		z := make([]float64, classes)
		for j := range z {
			z[j] = 1.5 * r.NormFloat64()
		}
		p := Softmax(z, 1)
		u, y := r.Float64(), 0
		for y < classes-1 && u > p[y] {
			u -= p[y]
			y++
		}
		for j := range z {
			z[j] *= k
		}
		scores[i], labels[i] = z, y
	}
	return scores, labels
}

func TestTemperatureScalingFixesOverconfidence(t *testing.T) {
	scores, labels := overconfident(4000, 4, 3, 7)
	temp, err := FitTemperature(scores, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !near(temp, 3, 0.3) {
		t.Errorf("fitted temperature %v, want about 3", temp)
	}
	before, _ := Evaluate(scores, labels, 1)
	after, _ := Evaluate(scores, labels, temp)
	if !(after.NLL < before.NLL) || !(after.ECE < before.ECE) || !(after.Brier < before.Brier) {
		t.Errorf("before %+v\nafter %+v: NLL, ECE and Brier must fall", before, after)
	}
	if after.ECE > 0.03 {
		t.Errorf("ECE after scaling %v, want ≤ 0.03", after.ECE)
	}
	if after.Accuracy != before.Accuracy {
		t.Errorf("accuracy changed from %v to %v: a temperature must not change answers", before.Accuracy, after.Accuracy)
	}
	// The fitted T is the minimum: nearby temperatures are no better.
	for _, f := range []float64{0.9, 1.1} {
		if NLL(scores, labels, temp*f) < NLL(scores, labels, temp)-1e-9 {
			t.Errorf("NLL at %v·T is lower than at T = %v", f, temp)
		}
	}
	cf, err := CrossFittedECE(scores, labels, 1)
	if err != nil || cf > 0.04 {
		t.Errorf("cross-fitted ECE %v (%v), want ≤ 0.04", cf, err)
	}
	// An under-confident model gets T < 1.
	under, ul := overconfident(4000, 3, 0.4, 8)
	if tu, _ := FitTemperature(under, ul); !near(tu, 0.4, 0.06) {
		t.Errorf("under-confident: T = %v, want about 0.4", tu)
	}
}

func TestFitTemperatureClamps(t *testing.T) {
	// Perfectly separated: NLL falls forever as T → 0.
	sep := [][]float64{{3, 0}, {0, 2}, {5, 1}}
	if got, _ := FitTemperature(sep, []int{0, 1, 0}); got != MinTemperature {
		t.Errorf("separable set: T = %v, want the clamp %v", got, MinTemperature)
	}
	// Always wrong: the flattest distribution is best.
	if got, _ := FitTemperature(sep, []int{1, 0, 1}); got != MaxTemperature {
		t.Errorf("always-wrong set: T = %v, want the clamp %v", got, MaxTemperature)
	}
	if _, err := FitTemperature(nil, nil); !errors.Is(err, ErrNoExamples) {
		t.Errorf("no examples: %v", err)
	}
	if _, err := FitTemperature([][]float64{{1, 2}}, []int{2}); err == nil {
		t.Error("label outside the options: no error")
	}
	if _, err := FitTemperature([][]float64{{math.NaN(), 2}}, []int{0}); err == nil {
		t.Error("NaN score: no error")
	}
}

func TestCoverage(t *testing.T) {
	conf := []float64{0.99, 0.95, 0.9, 0.8, 0.6, 0.55}
	correct := []bool{true, true, true, false, true, false}
	table := Coverage(conf, correct, []float64{0.9, 0, 0.97, 1})
	want := []CoveragePoint{
		{Threshold: 0, Coverage: 1, Accuracy: 4.0 / 6, N: 6},
		{Threshold: 0.9, Coverage: 0.5, Accuracy: 1, N: 3},
		{Threshold: 0.97, Coverage: 1.0 / 6, Accuracy: 1, N: 1},
		{Threshold: 1, Coverage: 0, Accuracy: 0, N: 0},
	}
	for i, w := range want {
		g := table[i]
		if g.Threshold != w.Threshold || g.N != w.N || !near(g.Coverage, w.Coverage, 1e-12) || !near(g.Accuracy, w.Accuracy, 1e-12) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	if len(SliderThresholds) != 101 || SliderThresholds[85] != 0.85 || !IsDefaultThreshold(SliderThresholds[85]) || IsDefaultThreshold(0.86) {
		t.Errorf("slider thresholds %v", SliderThresholds)
	}
	if th, ok := ThresholdFor(table, 0.95); !ok || th != 0.9 {
		t.Errorf("threshold for 95%% accuracy = %v, %v; want 0.9", th, ok)
	}
	if _, ok := ThresholdFor(Coverage(conf, []bool{false, false, false, false, false, false}, DefaultThresholds), 0.5); ok {
		t.Error("no threshold reaches 50% when everything is wrong")
	}
}
