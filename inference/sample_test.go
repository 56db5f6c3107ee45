package inference

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// full spreads a candidate list over the vocabulary.
func full(c []candidate, vocab int) []float64 {
	p := make([]float64, vocab)
	for _, x := range c {
		p[x.id] = x.p
	}
	return p
}

func TestSamplingDistributions(t *testing.T) {
	l := []float32{1, 2, 3, 0}
	neg := []float32{1, 2, 3, -1}
	// Worked by hand: softmax(1,2,3,0) = (e, e², e³, 1)/31.193 = .08714 .23688 .64391 .03206.
	for _, c := range []struct {
		name    string
		o       SampleOptions
		logits  []float32
		context []int
		want    []float64
	}{
		{"temperature 1", SampleOptions{Temperature: 1}, l, nil, []float64{.08714432, .23688282, .64391426, .0320586}},
		{"temperature 2 flattens", SampleOptions{Temperature: 2}, l, nil, []float64{.1674051, .27600434, .45505423, .10153632}},
		{"top-k 2", SampleOptions{Temperature: 1, TopK: 2}, l, nil, []float64{0, .26894142, .73105858, 0}},
		{"top-k ≥ vocab is off", SampleOptions{Temperature: 1, TopK: 9}, l, nil, []float64{.08714432, .23688282, .64391426, .0320586}},
		// Mass before each token, most likely first: 0, .644, .881 ≥ .8: two tokens stay.
		{"top-p 0.8", SampleOptions{Temperature: 1, TopP: 0.8}, l, nil, []float64{0, .26894142, .73105858, 0}},
		// .881 < .9 lets the third in; .968 ≥ .9 stops before the fourth.
		{"top-p 0.9", SampleOptions{Temperature: 1, TopP: 0.9}, l, nil, []float64{.09003057, .24472847, .66524096, 0}},
		{"top-p keeps at least one", SampleOptions{Temperature: 1, TopP: 1e-9}, l, nil, []float64{0, 0, 1, 0}},
		// min-p 0.2: threshold .2·.6439 = .1288 drops .0871 and .0321.
		{"min-p 0.2", SampleOptions{Temperature: 1, MinP: 0.2}, l, nil, []float64{0, .26894142, .73105858, 0}},
		{"min-p 0.1", SampleOptions{Temperature: 1, MinP: 0.1}, l, nil, []float64{.09003057, .24472847, .66524096, 0}},
		// top-k 3 renormalizes to .0900 .2447 .6652; then top-p 0.7 keeps two.
		{"top-k then top-p", SampleOptions{Temperature: 1, TopK: 3, TopP: 0.7}, l, nil, []float64{0, .26894142, .73105858, 0}},
		// Penalty 2 on tokens 2 and 3: 3 → 1.5 (divided), −1 → −2 (multiplied).
		{"repetition penalty", SampleOptions{Temperature: 1, RepetitionPenalty: 2}, neg, []int{2, 3, 3}, []float64{.18461118, .5018252, .30437237, .00919125}},
		// Window 1: only the last context token (0) is penalized: 1 → 0.5.
		{"repetition window", SampleOptions{Temperature: 1, RepetitionPenalty: 2, RepetitionWindow: 1}, neg, []int{2, 3, 0}, []float64{.05590555, .25055127, .68106897, .01247421}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewSampler(c.o)
			if err != nil {
				t.Fatal(err)
			}
			got := full(s.distribution(s.penalize(c.logits, c.context)), len(c.logits))
			for i := range got {
				if math.Abs(got[i]-c.want[i]) > 1e-6 {
					t.Fatalf("p = %.6f, want %.6f", got, c.want)
				}
			}
		})
	}
}

func TestGreedy(t *testing.T) {
	for _, c := range []struct {
		o       SampleOptions
		logits  []float32
		context []int
		want    int
	}{
		{SampleOptions{}, []float32{1, 2, 3, -1}, nil, 2},
		{SampleOptions{}, []float32{5, 5, 1}, nil, 0}, // ties: the lowest id
		{SampleOptions{RepetitionPenalty: 2.5}, []float32{1, 2, 3, -1}, []int{2}, 1},
		{SampleOptions{TopK: 1, TopP: 0.5}, []float32{0, 9, 1}, nil, 1}, // filters do not matter
	} {
		s, _ := NewSampler(c.o)
		if got := s.Sample(c.logits, c.context); got != c.want {
			t.Errorf("%+v on %v: got %d, want %d", c.o, c.logits, got, c.want)
		}
	}
}

func TestSamplerSeedAndFrequencies(t *testing.T) {
	l := []float32{1, 2, 3, 0}
	draw := func(seed uint64, n int) []int {
		s, _ := NewSampler(SampleOptions{Temperature: 1, Seed: seed})
		out := make([]int, n)
		for i := range out {
			out[i] = s.Sample(l, nil)
		}
		return out
	}
	a, b, c := draw(7, 50), draw(7, 50), draw(8, 50)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different draws: %v vs %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 drew the same 50 tokens")
	}
	const n = 40000
	counts := make([]float64, 4)
	for _, tok := range draw(1, n) {
		counts[tok]++
	}
	want := []float64{.08714432, .23688282, .64391426, .0320586}
	for i := range counts {
		// 4σ of a binomial proportion at n = 40000 is at most 0.01.
		if got := counts[i] / n; math.Abs(got-want[i]) > 0.01 {
			t.Errorf("token %d drawn %.4f of the time, want %.4f", i, got, want[i])
		}
	}
}

// On a large vocabulary the nucleus is found without sorting everything; it must
// match a brute-force sort.
func TestTopPLargeVocabulary(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 50000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	for _, p := range []float64{0.1, 0.5, 0.95, 0.9999} {
		s, _ := NewSampler(SampleOptions{Temperature: 0.7, TopP: p})
		got := s.distribution(logits)

		probs := make([]candidate, len(logits))
		zmax := float64(slices.Max(logits))
		total := 0.0
		for i, v := range logits {
			probs[i] = candidate{i, math.Exp((float64(v) - zmax) / 0.7)}
			total += probs[i].p
		}
		slices.SortStableFunc(probs, func(a, b candidate) int { return cmp.Compare(b.p, a.p) })
		acc, n := 0.0, 0
		for acc/total < p {
			acc += probs[n].p
			n++
		}
		want := probs[:n]
		slices.SortFunc(want, func(a, b candidate) int { return cmp.Compare(a.id, b.id) })
		if len(got) != n {
			t.Fatalf("top-p %g kept %d tokens, brute force %d", p, len(got), n)
		}
		for i := range got {
			if got[i].id != want[i].id || math.Abs(got[i].p-want[i].p/acc) > 1e-9 {
				t.Fatalf("top-p %g: token %d is %+v, want id %d p %g", p, i, got[i], want[i].id, want[i].p/acc)
			}
		}
	}
}

func TestSampleOptionsValidate(t *testing.T) {
	for _, o := range []SampleOptions{
		{Temperature: -1}, {Temperature: math.NaN()}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1},
		{RepetitionPenalty: -1}, {RepetitionWindow: -2},
	} {
		if _, err := NewSampler(o); err == nil {
			t.Errorf("NewSampler(%+v) accepted", o)
		}
	}
}

func BenchmarkSampleQwenVocabulary(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	for _, c := range []struct {
		name string
		o    SampleOptions
	}{
		{"greedy", SampleOptions{}},
		{"temperature", SampleOptions{Temperature: 0.7}},
		{"top-k-20-top-p-0.8", SampleOptions{Temperature: 0.7, TopK: 20, TopP: 0.8}},
		{"top-p-0.95-penalty", SampleOptions{Temperature: 0.7, TopP: 0.95, RepetitionPenalty: 1.1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, _ := NewSampler(c.o)
			ctx := []int{1, 2, 3, 4, 5}
			for i := 0; i < b.N; i++ {
				s.Sample(logits, ctx)
			}
		})
	}
}

// TestExpNeg checks the sampler's exponential against math.Exp over the range the
// sampler uses it on, at its ends and on both sides of every point where its
// m = round(64·d/ln 2) steps.
func TestExpNeg(t *testing.T) {
	worst := 0.0
	check := func(d float64) {
		want := math.Exp(-d)
		if e := math.Abs(expNeg(d)-want) / want; e > worst {
			worst = e
		}
	}
	for d := 0.0; d < negligible; d += 0.000731 {
		check(d)
	}
	for k := 0; float64(k) < 64*negligible/math.Ln2; k++ {
		h := (float64(k) + 0.5) * math.Ln2 / 64 // where 64·d/ln 2 rounds the other way
		check(h)
		check(math.Nextafter(h, 0))
		check(math.Nextafter(h, 100))
	}
	check(0)
	check(math.Nextafter(negligible, 0))
	if worst > 6.7e-16 {
		t.Errorf("expNeg: worst relative error %.3g against math.Exp, want ≤ 6.7e-16 (3 ulp)", worst)
	}
}

// TestSampleNonFinite: logits with NaN or infinities (a broken model) give some token
// in range under every filter, never a panic: top-p's buckets are only read for
// finite, positive weights.
func TestSampleNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, row := range [][]float32{{nan, 1, 2}, {1, nan, 2}, {inf, 1, 2}, {-inf, -inf}, {nan, nan}, {1, inf, inf}} {
		for _, o := range []SampleOptions{{Temperature: 0.7}, {Temperature: 0.7, TopP: 0.9}, {Temperature: 1, TopK: 2, MinP: 0.1},
			{Temperature: 0.9, TopK: 50, TopP: 0.95, MinP: 0.02, RepetitionPenalty: 1.1}} {
			s, _ := NewSampler(o)
			for range 3 {
				if tok := s.Sample(row, []int{0, 1}); tok < 0 || tok >= len(row) {
					t.Fatalf("%v %+v: token %d", row, o, tok)
				}
			}
		}
	}
}
