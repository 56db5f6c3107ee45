package deltamem

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/trainer"
)

func cpu(t testing.TB) mx.Backend {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyModel is the test model of inferencetest (llama, hidden 64, 2 layers),
// or the qwen3 shape of it.
func tinyModel(t testing.TB, arch string) *inference.Model {
	c := inferencetest.Config()
	c.ModelType = arch
	return inference.NewRandom(c, 1, cpu(t))
}

func seq(n, vocab int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int, n)
	for i := range out {
		out[i] = r.IntN(vocab)
	}
	return out
}

// randomize gives the corrections (zero in a new memory) random values, so a
// test sees the memory act.
func randomize(t testing.TB, mem *Memory, scale float64, seed uint64) *Memory {
	t.Helper()
	p := mem.Params()
	r := rand.New(rand.NewPCG(seed, 2))
	for name, a := range p {
		vals, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			switch {
			case a.Ndim() == 2 && a.Dim(0) == mem.rank: // query_out, attn_out
				vals[i] = float32(r.NormFloat64() * scale)
			default:
				vals[i] += float32(r.NormFloat64() * 0.3)
			}
		}
		p[name] = mx.FromData(a.Backend(), mx.Float32, vals, a.Shape()...)
	}
	out, err := mem.WithParams(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func logitsOf(t testing.TB, a *mx.Array) []float32 {
	t.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// sessionLogits prefills ids[:n] in a session (with mem attached when not nil)
// and decodes the rest one token at a time; every logits vector, in order.
func sessionLogits(t *testing.T, m *inference.Model, mem *Memory, st *State, ids []int, n int) [][]float32 {
	t.Helper()
	s := inference.NewSession(m)
	if mem != nil {
		if err := mem.Attach(m, s.Cache(), st); err != nil {
			t.Fatal(err)
		}
	}
	lg, _, err := s.Prefill(ids[:n])
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{logitsOf(t, lg)}
	for _, id := range ids[n:] {
		if lg, err = s.Append([]int{id}); err != nil {
			t.Fatal(err)
		}
		out = append(out, logitsOf(t, lg))
	}
	return out
}

// TestUntrainedMemoryChangesNothing: a new memory's corrections are zero, so a
// session with it attached gives the plain model's logits bit for bit, while
// its state does fill up.
func TestUntrainedMemoryChangesNothing(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			m := tinyModel(t, arch)
			ids := seq(40, m.Config().VocabSize, 3)
			want := sessionLogits(t, m, nil, nil, ids, 25)
			mem, err := New(m, Config{}, 7)
			if err != nil {
				t.Fatal(err)
			}
			st := mem.NewState()
			got := sessionLogits(t, m, mem, st, ids, 25)
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("position %d: an untrained memory changed the logits (max diff %g)", i, maxDiff(got[i], want[i]))
				}
			}
			if st.Writes != 40 || st.Norm() == 0 {
				t.Fatalf("state after 40 tokens: %d writes, norm %g; want 40 and > 0", st.Writes, st.Norm())
			}
		})
	}
}

// TestLiveMatchesTraced: the chat path (Go recurrence) and the training path
// (bridge ops, a batch) compute the same logits, for a memory whose corrections
// are not zero, over a read, a reset of the KV cache and a question.
func TestLiveMatchesTraced(t *testing.T) {
	m := tinyModel(t, "llama")
	mem, err := New(m, Config{Rank: 4, Layers: []int{1}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mem = randomize(t, mem, 0.5, 3)
	vocab := m.Config().VocabSize
	read, ask := seq(20, vocab, 5), seq(9, vocab, 6)

	// live, as Evaluate runs it
	lpLive, err := askLogits(m, mem, read, Episode{Ask: ask, From: 1})
	if err != nil {
		t.Fatal(err)
	}
	// traced, batch of one
	c := inference.NewCache(m)
	if _, err := mem.attachTraced(c, 1, m.Backend()); err != nil {
		t.Fatal(err)
	}
	ids, _ := m.Tokens(read)
	mx.Eval(m.ForwardLast(ids, c))
	c.Reset()
	ids, _ = m.Tokens(ask)
	lpTraced := logitsOf(t, mx.LogSoftmax(m.Forward(ids, c)))
	if d := maxDiff(lpLive, lpTraced); d > 2e-4 {
		t.Fatalf("chat and training paths differ by %g", d)
	}
	plain, err := askLogits(m, nil, nil, Episode{Ask: ask, From: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(lpLive, plain); d < 1e-3 {
		t.Fatalf("a memory with random corrections moved the logits by only %g", d)
	}
}

// TestDecodeMatchesPrefill: reading a text one token at a time leaves the same
// state as reading it at once.
func TestDecodeMatchesPrefill(t *testing.T) {
	m := tinyModel(t, "qwen3")
	mem, _ := New(m, Config{}, 2)
	mem = randomize(t, mem, 0.3, 4)
	ids := seq(16, m.Config().VocabSize, 9)
	a, b := mem.NewState(), mem.NewState()
	la := sessionLogits(t, m, mem, a, ids, 16)
	lb := sessionLogits(t, m, mem, b, ids, 1)
	if d := maxDiff(la[0], lb[len(lb)-1]); d > 1e-4 {
		t.Fatalf("last logits differ by %g between prefill and decode", d)
	}
	for i := range a.S {
		if d := maxDiff(a.S[i], b.S[i]); d > 1e-5 {
			t.Fatalf("layer %d: state differs by %g", i, d)
		}
	}
}

// TestGradientMatchesFiniteDifferences checks the gradient of the training loss
// with respect to every kind of memory parameter against central differences,
// through a read, a reset of the KV cache and a question: the gradient of the
// projection reaches the question only through the state.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	m := tinyModel(t, "llama")
	mem, err := New(m, Config{Rank: 3}, 11)
	if err != nil {
		t.Fatal(err)
	}
	mem = randomize(t, mem, 0.5, 12)
	vocab := m.Config().VocabSize
	eps := []Episode{
		{Read: seq(10, vocab, 1), Ask: seq(7, vocab, 2), From: 4},
		{Read: seq(10, vocab, 3), Ask: seq(7, vocab, 4), From: 4},
	}
	bt := recallBatch(mem, eps)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range mem.params {
			if !yield(n) {
				return
			}
		}
	})
	xs := make([]*mx.Array, len(names))
	for i, n := range names {
		xs[i] = mem.params[n]
	}
	loss := func(p []*mx.Array) []*mx.Array {
		named := map[string]*mx.Array{}
		for i, n := range names {
			named[n] = p[i]
		}
		return []*mx.Array{bt.Loss(m, named)}
	}
	_, grads, err := mx.ValueAndGrad(loss, xs)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	const h = 1e-2
	for i, n := range names {
		g := logitsOf(t, grads[i])
		base := logitsOf(t, xs[i])
		for range 4 {
			j := r.IntN(len(base))
			if filepath.Ext(n) == ".proj" && r.IntN(2) == 0 {
				// a key column (the first rank columns): reaches the loss only
				// through what the state stored
				j = (j / (5 * mem.rank) * 5 * mem.rank) + r.IntN(mem.rank)
			}
			at := func(v float32) float64 {
				p := slices.Clone(xs)
				vals := slices.Clone(base)
				vals[j] = v
				p[i] = mx.FromData(xs[i].Backend(), mx.Float32, vals, xs[i].Shape()...)
				l, err := loss(p)[0].Item()
				if err != nil {
					t.Fatal(err)
				}
				return float64(l)
			}
			fd := (at(base[j]+h) - at(base[j]-h)) / (2 * h)
			t.Logf("%s[%d]: gradient %g, finite differences %g", n, j, g[j], fd)
			if math.Abs(fd-float64(g[j])) > 2e-3+0.05*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %g, finite differences %g", n, j, g[j], fd)
			}
		}
		if slices.Max(g) == 0 && slices.Min(g) == 0 {
			t.Errorf("%s: gradient is zero everywhere", n)
		}
	}
}

// TestTrainLowersLoss: a few steps of the shared training step on the tiny
// model lower the recall loss of the episodes trained on, and leave the
// model's weights alone.
func TestTrainLowersLoss(t *testing.T) {
	m := tinyModel(t, "llama")
	before := m.Params()
	vocab := m.Config().VocabSize
	var docs [][]int
	for i := range 20 {
		docs = append(docs, seq(40, vocab, uint64(100+i)))
	}
	task := Task{Fact: 12, Filler: 4, Cue: 3, Answer: 3}
	var events int
	_, res, err := Train(context.Background(), m, nil, docs, TrainOptions{Task: task, Steps: 25, Batch: 4, LearningRate: 1e-2, Seed: 1},
		func(ev trainer.Event) {
			if ev.Kind == trainer.EventTrain {
				events++
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if events != 25 || len(res.Steps) != 25 {
		t.Fatalf("%d step events, %d steps; want 25", events, len(res.Steps))
	}
	first, last := res.Steps[0].Loss, res.Steps[len(res.Steps)-1].Loss
	if !(last < first) {
		t.Fatalf("loss %g -> %g, want lower", first, last)
	}
	for name, a := range m.Params() {
		if before[name] != a {
			t.Fatalf("training the memory changed the model's %s", name)
		}
	}
}

// TestSaveLoad: a saved memory loads back with the same numbers, and a memory
// file refuses a model of another shape.
func TestSaveLoad(t *testing.T) {
	m := tinyModel(t, "llama")
	mem, _ := New(m, Config{Rank: 4, Layers: []int{1}}, 3)
	mem = randomize(t, mem, 0.2, 1)
	path := filepath.Join(t.TempDir(), FileName)
	if err := mem.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank() != 4 || !slices.Equal(got.Layers(), []int{1}) {
		t.Fatalf("loaded rank %d layers %v", got.Rank(), got.Layers())
	}
	for name, a := range mem.Params() {
		if !slices.Equal(logitsOf(t, a), logitsOf(t, got.params[name])) {
			t.Fatalf("%s differs after a round trip", name)
		}
	}
	c := inferencetest.Config()
	c.HiddenSize, c.IntermediateSize = 32, 64
	other := inference.NewRandom(c, 1, cpu(t))
	if _, err := Load(path, other); !errors.Is(err, ErrMismatch) {
		t.Fatalf("loading for another hidden size: %v, want ErrMismatch", err)
	}
}

// TestDetachRestoresThePlainModel: after a trained memory is detached, the
// session computes the plain model's logits bit for bit (memory off is the
// model without a hook).
func TestDetachRestoresThePlainModel(t *testing.T) {
	m := tinyModel(t, "llama")
	ids := seq(20, m.Config().VocabSize, 8)
	want := sessionLogits(t, m, nil, nil, ids, 12)
	mem, _ := New(m, Config{}, 1)
	mem = randomize(t, mem, 0.5, 2)
	s := inference.NewSession(m)
	if err := mem.Attach(m, s.Cache(), mem.NewState()); err != nil {
		t.Fatal(err)
	}
	on, _, err := s.Prefill(ids[:12])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(logitsOf(t, on), want[0]) {
		t.Fatal("an attached memory with random corrections changed nothing")
	}
	Detach(s.Cache())
	s.Reset()
	lg, _, err := s.Prefill(ids[:12])
	if err != nil {
		t.Fatal(err)
	}
	got := [][]float32{logitsOf(t, lg)}
	for _, id := range ids[12:] {
		if lg, err = s.Append([]int{id}); err != nil {
			t.Fatal(err)
		}
		got = append(got, logitsOf(t, lg))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("position %d: detached session differs from the plain model (max diff %g)", i, maxDiff(got[i], want[i]))
		}
	}
}
