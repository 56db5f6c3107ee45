package tao

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// tinyPairs is the tiny test model with a random-looking adapter and three
// pairs of different lengths (so the batch is padded), with reference
// log-probabilities a little off the model's own.
func tinyPairs(t *testing.T) (*inference.Model, []pair) {
	t.Helper()
	m, _ := inferencetest.Load(t, inferencetest.Dir(t))
	pushUserAdapter(t, m, 5)
	r := rand.New(rand.NewPCG(11, 11))
	seq := func(prompt, answer int) sequence {
		ids := make([]int, prompt+answer)
		for i := range ids {
			ids[i] = r.IntN(m.Config().VocabSize)
		}
		return sequence{ids: ids, start: prompt}
	}
	pairs := []pair{
		{chosen: seq(5, 4), rejected: seq(5, 7), refChosen: -20, refRejected: -35},
		{chosen: seq(3, 6), rejected: seq(3, 2), refChosen: -31, refRejected: -12},
		{chosen: seq(8, 3), rejected: seq(8, 5), refChosen: -18, refRejected: -27},
	}
	return m, pairs
}

// TestLossMatchesDefinition computes the loss of lossBatch by its formula,
// one sequence at a time in float64 from the model's logits, and compares.
func TestLossMatchesDefinition(t *testing.T) {
	m, pairs := tinyPairs(t)
	logp := func(s sequence) float64 { // log π(answer | prompt), one sequence alone
		ids := make([]int32, len(s.ids)-1)
		for i := range ids {
			ids[i] = int32(s.ids[i])
		}
		logits, err := m.Forward(mx.FromData(m.Backend(), mx.Int32, ids, 1, len(ids)), nil).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config().VocabSize
		var lp float64
		for i := s.start - 1; i < len(ids); i++ {
			row := logits[i*v : (i+1)*v]
			var mx float64 = math.Inf(-1)
			for _, z := range row {
				mx = math.Max(mx, float64(z))
			}
			var sum float64
			for _, z := range row {
				sum += math.Exp(float64(z) - mx)
			}
			lp += float64(row[s.ids[i+1]]) - mx - math.Log(sum)
		}
		return lp
	}
	const beta, lambda = 0.5, 0.7
	var nll, tokens, dpo float64
	for _, p := range pairs {
		w, l := logp(p.chosen), logp(p.rejected)
		nll -= w
		tokens += float64(p.chosen.answerLen())
		z := beta * ((w - p.refChosen) - (l - p.refRejected))
		dpo += math.Log1p(math.Exp(-z))
	}
	for _, c := range []struct {
		lambda float64
		want   float64
	}{
		{0, nll / tokens},
		{lambda, nll/tokens + lambda*dpo/float64(len(pairs))},
	} {
		b := lossBatch(pairs, c.lambda, beta, 0)
		got, err := b.Loss(m, nil).Item()
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(got)-c.want) > 1e-4*math.Max(1, math.Abs(c.want)) {
			t.Errorf("λ = %g: loss %v, want %v", c.lambda, got, c.want)
		}
		if b.Weight != float32(tokens) {
			t.Errorf("weight %v, want the %v best-answer tokens", b.Weight, tokens)
		}
	}
	// logProbs, batched and padded, gives each sequence's own value.
	var seqs []sequence
	for _, p := range pairs {
		seqs = append(seqs, p.chosen, p.rejected)
	}
	lp, err := logProbs(m, seqs, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if want := logp(s); math.Abs(lp[i]-want) > 1e-4*math.Max(1, math.Abs(want)) {
			t.Errorf("sequence %d: log-probability %v, want %v", i, lp[i], want)
		}
	}
}

// TestLossGradientsFiniteDifferences checks the gradient of the combined
// loss (best-of-n NLL + DPO) with respect to the adapter against central
// differences.
func TestLossGradientsFiniteDifferences(t *testing.T) {
	m, pairs := tinyPairs(t)
	b := lossBatch(pairs, 0.7, 0.5, 0)
	names, xs := optim.Flatten(lora.Params(m))
	f := func(p []*mx.Array) *mx.Array {
		if err := lora.SetParams(m, optim.Unflatten(names, p)); err != nil {
			return mx.ErrorArray(err)
		}
		return b.Loss(m, nil)
	}
	_, grads, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{f(p)} }, xs)
	if err != nil {
		t.Fatal(err)
	}
	at := func(p []*mx.Array) float64 {
		v, err := f(p).Item()
		if err != nil {
			t.Fatal(err)
		}
		return float64(v)
	}
	const eps = 1e-2
	checked, nonzero := 0, 0
	for i, name := range names {
		if i%3 != 0 { // a third of the adapter's arrays, both kinds
			continue
		}
		g, _ := grads[i].Float32s()
		x, _ := xs[i].Float32s()
		for _, j := range []int{0, len(x) / 2, len(x) - 1} {
			shifted := func(d float32) []*mx.Array {
				cp := slices.Clone(x)
				cp[j] += d
				p := slices.Clone(xs)
				p[i] = mx.FromData(xs[i].Backend(), mx.Float32, cp, xs[i].Shape()...)
				return p
			}
			fd := (at(shifted(eps)) - at(shifted(-eps))) / (2 * eps)
			if math.Abs(fd-float64(g[j])) > 2e-3+2e-2*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %v, finite difference %v", name, j, g[j], fd)
			}
			if math.Abs(fd) > 1e-3 {
				nonzero++
			}
			checked++
		}
	}
	if checked < 12 || nonzero < checked/3 {
		t.Errorf("checked %d coordinates, %d with a gradient worth the name", checked, nonzero)
	}
}

func TestSoftplus(t *testing.T) {
	b, _ := mx.Open("cpu")
	xs := []float32{-100, -3, -1e-3, 0, 2, 50, 200}
	got, err := softplus(mx.FromData(b, mx.Float32, xs, len(xs))).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		want := math.Max(float64(x), 0) + math.Log1p(math.Exp(-math.Abs(float64(x))))
		if math.Abs(float64(got[i])-want) > 1e-5*math.Max(1, want) || math.IsInf(float64(got[i]), 0) {
			t.Errorf("softplus(%v) = %v, want %v", x, got[i], want)
		}
	}
}
