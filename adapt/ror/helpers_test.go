package ror

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// The tests run on the bundled demo backbone with the sample tickets task. A
// decision model trained by decide.Train takes minutes there (every step runs
// the backbone forward and back), so the fixture is made the way RoR itself
// learns: a zero-shot decision model, whose head is then fitted on the cached
// features of fitRows (a few hundred cheap full-batch steps) and saved, for
// decide.Load to read — the Learner's check then confirms decide scores it as
// RoR does. The model is deliberately undertrained (few rows), so that it gets
// tickets wrong for the corrections to fix.
//
// The rows of the tickets file (2,000) are split by position, so no test
// trains on what it measures:
//
// Every fixture Learner has the same backbone and no adapter, so the features
// of a (question, state) are the same for all of them: the fixture computes
// them once (the anchor set's in New, the rest in scored) and the Learners of
// the tests are copies of one made by New, sharing them. Without that the
// forward passes alone would take minutes.
const (
	fitRows       = 64   // rows[0:64]: the fixture's training rows
	candidateFrom = 100  // rows[100:160]: where corrections come from
	candidateTo   = 160  //
	anchorFrom    = 400  // rows[400:460]: the anchor set
	anchorTo      = 460  //
	heldFrom      = 1000 // rows[1000:1100]: held out, never corrected
	heldTo        = 1100 //
)

var fixture struct {
	once sync.Once
	err  error
	root string

	base *inference.Model
	tok  *tokenizer.Tokenizer
	task *decide.Task
	rows []decide.Row
	dir  string // the fitted decision model

	first *Learner               // New over the fitted model with the anchor rows
	cache map[cacheKey]*features // features under the fixture backbone
}

type cacheKey struct {
	question int
	state    string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.root != "" {
		os.RemoveAll(fixture.root)
	}
	os.Exit(code)
}

// setup loads the demo backbone and the tickets rows and fits the fixture
// model, once per test binary.
func setup(t testing.TB) {
	t.Helper()
	fixture.once.Do(func() { fixture.err = makeFixture() })
	if fixture.err != nil {
		t.Fatal(fixture.err)
	}
}

func makeFixture() error {
	root, err := os.MkdirTemp("", "ror-test-")
	if err != nil {
		return err
	}
	fixture.root = root
	if err := os.CopyFS(filepath.Join(root, "demo"), resources.DemoFS()); err != nil {
		return err
	}
	b, err := mx.Open("cpu")
	if err != nil {
		return err
	}
	if fixture.base, err = inference.Load(filepath.Join(root, "demo"), b); err != nil {
		return err
	}
	if fixture.tok, err = tokenizer.Load(filepath.Join(root, "demo")); err != nil {
		return err
	}
	taskJSON, rowsJSONL := resources.TicketsTask()
	if fixture.task, err = decide.ParseTask(taskJSON); err != nil {
		return err
	}
	rep, err := decide.ParseRows(bytes.NewReader(rowsJSONL), fixture.task, decide.ParseOptions{RequireAnswers: true})
	if err != nil {
		return err
	}
	if rep.Bad > 0 || len(rep.Rows) < heldTo {
		return fmt.Errorf("tickets rows: %d bad, %d kept", rep.Bad, len(rep.Rows))
	}
	fixture.rows = rep.Rows
	fixture.dir = filepath.Join(root, "tickets")
	if err := fitFixture(context.Background(), fixture.dir, fixture.rows[:fitRows], 300); err != nil {
		return err
	}
	m, err := decide.Load(fixture.dir, fixture.base, fixture.tok)
	if err != nil {
		return err
	}
	fixture.first, err = New(context.Background(), m, fixture.base, fixture.tok, fixture.rows[anchorFrom:anchorTo], Options{})
	if err != nil {
		return err
	}
	fixture.cache = map[cacheKey]*features{}
	for _, it := range fixture.first.anchor {
		fixture.cache[cacheKey{it.question, it.state}] = it.feat
	}
	return nil
}

// fitFixture saves a zero-shot model to dir and replaces its head with one
// fitted on rows: the pooled state standardized over rows (as decide does
// over its training rows), then full-batch Adam on the cached features.
func fitFixture(ctx context.Context, dir string, rows []decide.Row, steps int) error {
	zs, err := decide.ZeroShot(fixture.base, fixture.tok, fixture.task, 0)
	if err != nil {
		return err
	}
	if err := zs.Save(dir); err != nil {
		return err
	}
	l, err := New(ctx, zs, fixture.base, fixture.tok, rows, Options{}) // the anchor set's features are the rows'
	if err != nil {
		return err
	}
	items := l.anchor
	head := maps.Clone(l.current.head)
	for qi, q := range fixture.task.Questions {
		var pooled [][]float32
		for _, it := range items {
			if it.question == qi {
				pooled = append(pooled, it.feat.pooled)
			}
		}
		mean, scale := make([]float32, l.hidden), make([]float32, l.hidden)
		for d := range mean {
			var s, s2 float64
			for _, p := range pooled {
				s, s2 = s+float64(p[d]), s2+float64(p[d])*float64(p[d])
			}
			mu := s / float64(len(pooled))
			mean[d], scale[d] = float32(mu), float32(math.Sqrt(max(s2/float64(len(pooled))-mu*mu, 0))+1e-3)
		}
		head[headName(q.Name, "pool_mean")] = mx.FromData(l.work.Backend(), mx.Float32, mean, l.hidden)
		head[headName(q.Name, "pool_scale")] = mx.FromData(l.work.Backend(), mx.Float32, scale, l.hidden)
	}
	weights := map[*item]float32{}
	for _, it := range items {
		weights[it] = 1 / float32(len(items))
	}
	params := map[string]*mx.Array{}
	for _, n := range l.trainables {
		params[n] = head[n]
	}
	opt := optim.NewAdam(optim.Constant(5e-3))
	opt.BiasCorrection = true
	stepper := trainer.Stepper{Bind: func(map[string]*mx.Array) (*inference.Model, error) { return l.work, nil }, Optimizer: opt}
	batch := trainer.Batch{Weight: float32(len(items)), Loss: func(m *inference.Model, p map[string]*mx.Array) *mx.Array {
		h := maps.Clone(head)
		maps.Copy(h, p)
		return loss(nil, m.Backend(), fixture.task, h, items, weights, l.hidden, l.pad)
	}}
	for range steps {
		sr, err := stepper.Step(ctx, params, []trainer.Batch{batch})
		if err != nil {
			return err
		}
		params = sr.Params
	}
	maps.Copy(head, params)
	return mx.SaveSafetensors(filepath.Join(dir, decide.HeadFile), head, map[string]string{"format": "inloop-decide"})
}

// model loads a fresh copy of the fixture model.
func model(t testing.TB) *decide.Model {
	t.Helper()
	setup(t)
	m, err := decide.Load(fixture.dir, fixture.base, fixture.tok)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// learner is a Learner over a fresh fixture model with the anchor rows, made
// as New makes it, but sharing the anchor set's features with fixture.first.
func learner(t testing.TB, opts Options) *Learner {
	t.Helper()
	setup(t)
	l, err := newLearner(model(t), fixture.base, fixture.tok, opts)
	if err != nil {
		t.Fatal(err)
	}
	l.anchor = fixture.first.anchor
	l.current.anchor = fixture.first.current.anchor
	return l
}

// scored is rows laid out (the questions given, or all) with their features,
// for scoring under any version of a head-only Learner's head.
func scored(t testing.TB, l *Learner, rows []decide.Row, questions ...int) []*item {
	t.Helper()
	var items []*item
	for _, r := range rows {
		its, err := l.rowItems(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if len(questions) == 0 || slices.Contains(questions, it.question) {
				it.feat = fixture.cache[cacheKey{it.question, it.state}]
				items = append(items, it)
			}
		}
	}
	if l.m.Meta.Adapter || l.workGen != 0 {
		t.Fatal("scored shares features of the fixture backbone; this Learner has an adapter")
	}
	if err := l.features(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		fixture.cache[cacheKey{it.question, it.state}] = it.feat
	}
	return items
}

// accuracy of items under the current version, and each item's scores.
func accuracy(t testing.TB, l *Learner, items []*item) (float64, [][]float64) {
	t.Helper()
	s, err := scoreCached(l.work.Backend(), l.m.Task, l.current.head, items, l.hidden)
	if err != nil {
		t.Fatal(err)
	}
	right := 0
	for i, it := range items {
		if argmax(s[i]) == it.label {
			right++
		}
	}
	return float64(right) / float64(len(items)), s
}

func argmax(s []float64) int {
	k := 0
	for i, v := range s {
		if v > s[k] {
			k = i
		}
	}
	return k
}

// wrong returns the items among rows (of question qi) the current version gets
// wrong, with its scores.
func wrong(t testing.TB, l *Learner, rows []decide.Row, qi int) []*item {
	t.Helper()
	items := scored(t, l, rows, qi)
	_, s := accuracy(t, l, items)
	var out []*item
	for i, it := range items {
		if argmax(s[i]) != it.label {
			out = append(out, it)
		}
	}
	return out
}

// headBits is every head weight's bits, to compare versions exactly.
func headBits(t testing.TB, h map[string]*mx.Array) map[string][]uint32 {
	t.Helper()
	out := map[string][]uint32{}
	for n, a := range h {
		v, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		bits := make([]uint32, len(v))
		for i, x := range v {
			bits[i] = math.Float32bits(x)
		}
		out[n] = bits
	}
	return out
}

// decideBits is the Learner's decisions for states, as the bits of every
// raw score and the choices.
func decideBits(t testing.TB, l *Learner, states []string) []string {
	t.Helper()
	ds, _, err := l.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, row := range ds {
		for _, d := range row {
			s := d.Choice
			for _, x := range d.Scores {
				s += fmt.Sprintf(" %016x", math.Float64bits(x))
			}
			out = append(out, s)
		}
	}
	return out
}
