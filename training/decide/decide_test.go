package decide

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

var (
	tinyIters = flag.Int("tiny-iters", 100, "updates of the tiny model's training in tests")
	tinyRows  = flag.Int("tiny-rows", 160, "rows of the tiny model's training in tests")
)

// tiny is the shared tiny model (inferencetest) with an end-of-text token the
// encoder closes options with.
func tiny(t testing.TB) (string, *inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir := inferencetest.Dir(t, inferencetest.WithFile("tokenizer_config.json", tinyTokenizerConfig))
	m, tok := loadTiny(t, dir)
	return dir, m, tok
}

var tinyTokenizerConfig = []byte(`{"eos_token": "<|end|>", "bos_token": "<|bos|>"}`)

// tinyIn writes the tiny model into dir/model, for a model that outlives one
// test.
func tinyIn(t testing.TB, dir string) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	src := inferencetest.Dir(t, inferencetest.WithFile("tokenizer_config.json", tinyTokenizerConfig))
	if err := os.CopyFS(filepath.Join(dir, "model"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return loadTiny(t, filepath.Join(dir, "model"))
}

func loadTiny(t testing.TB, dir string) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	return inferencetest.Load(t, dir)
}

// colorRows makes rows whose color is told by a thing of that color in the
// state (apple: red) and whose ok is whether "fine" appears, among filler words.
func colorRows(n int, seed uint64) []Row {
	r := rand.New(rand.NewPCG(seed, 2))
	colors := []string{"apple", "grass", "sea"}
	filler := []string{"a", "the", "car", "box", "is", "my", "old", "new", "hat", "sky"}
	rows := make([]Row, n)
	for i := range rows {
		c, ok := r.IntN(3), r.IntN(2)
		var words []string
		for range 3 + r.IntN(6) {
			words = append(words, filler[r.IntN(len(filler))])
		}
		words = slices.Insert(words, r.IntN(len(words)+1), colors[c])
		if ok == 0 {
			words = slices.Insert(words, r.IntN(len(words)+1), "fine")
		}
		rows[i] = Row{Line: i + 1, State: strings.Join(words, " "), Labels: []int{c, ok}}
	}
	return rows
}

func TestStepZeroEqualsRestrictedDecoding(t *testing.T) {
	_, base, tok := tiny(t)
	task := mustTask(t, smallTask)
	zs, err := ZeroShot(base, tok, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The model training starts from: a fresh adapter (lora_b = 0) over the base.
	fresh, err := ZeroShot(base, tok, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lora.Apply(fresh.model, lora.Config{NumLayers: -1, Rank: 4}); err != nil {
		t.Fatal(err)
	}
	// States of different lengths share batches, so padding is exercised.
	states := []string{"red", "a long note about the green grass and the sky", "blue hat, fine", "x"}
	for _, m := range []*Model{zs, fresh} {
		got, _, err := m.Decide(context.Background(), states)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range states {
			toks, _ := zs.enc.StateTokens(st)
			for qi := range task.Questions {
				seq := zs.enc.Sequence(qi, toks)
				ids, _ := base.Tokens(seq.Prompt())
				logits, err := base.ForwardLast(ids, nil).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for k, first := range zs.enc.FirstTokens(qi) {
					want, g := float64(logits[first]), got[i][qi].Scores[k]
					if math.Abs(g-want) > 1e-4*max(1, math.Abs(want)) {
						t.Errorf("state %q, question %s, option %d: head score %v, restricted decoding logit %v", st, task.Questions[qi].Name, k, g, want)
					}
				}
			}
		}
	}
}

// The head's gradients (and one adapter's) against central differences.
func TestHeadGradientsFiniteDifferences(t *testing.T) {
	_, base, tok := tiny(t)
	task := mustTask(t, smallTask)
	m, err := ZeroShot(base, tok, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lora.Apply(m.model, lora.Config{NumLayers: 1, Rank: 2, Keys: []string{"self_attn.v_proj"}}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	randomize := func(a *mx.Array, scale float64) *mx.Array {
		v := make([]float32, a.Size())
		for i := range v {
			v[i] = float32(scale * r.NormFloat64())
		}
		return mx.FromData(a.Backend(), mx.Float32, v, a.Shape()...)
	}
	params := map[string]*mx.Array{}
	fixed := map[string]*mx.Array{}
	for n, a := range m.head {
		if isFixed(n) {
			fixed[n] = randomize(a, 0.1)
			if strings.HasSuffix(n, "scale") {
				fixed[n] = mx.AddScalar(mx.Abs(fixed[n]), 0.5)
			}
			continue
		}
		params[n] = randomize(a, 0.3) // a marker vector, pool and bias away from zero
	}
	for n, a := range lora.Params(m.model) {
		params[n] = randomize(a, 0.2)
	}
	rows := colorRows(3, 9)
	var seqs []Sequence
	var labels []int
	for _, row := range rows {
		toks, _ := m.enc.StateTokens(row.State)
		for q := range task.Questions {
			seqs, labels = append(seqs, m.enc.Sequence(q, toks)), append(labels, row.Labels[q])
		}
	}
	bt := newBatch(seqs, labels, func(q int) int { return len(task.Questions[q].Options) }, m.enc.Marker())
	names, xs := optim.Flatten(params)
	f := func(p []*mx.Array) *mx.Array {
		named := optim.Unflatten(names, p)
		ad := map[string]*mx.Array{}
		for n, a := range named {
			if !IsHeadParam(n) {
				ad[n] = a
			}
		}
		if err := lora.SetParams(m.model, ad); err != nil {
			return mx.ErrorArray(err)
		}
		for n, a := range fixed {
			named[n] = a
		}
		return loss(m.model, named, task, bt)
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
	checked := 0
	for i, name := range names {
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
			checked++
		}
	}
	if checked < 21 {
		t.Errorf("checked %d coordinates", checked)
	}
}

func TestSplitStratifiedAndDisjoint(t *testing.T) {
	rows := colorRows(400, 4)
	// Duplicated states must land on one side.
	rows[10].State, rows[20].State, rows[30].State = "same", "same", "same"
	sp, err := MakeSplit(rows, 0.25, 7)
	if err != nil {
		t.Fatal(err)
	}
	train, held, err := sp.Apply(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(train)+len(held) != len(rows) || math.Abs(float64(len(held))/400-0.25) > 0.03 {
		t.Fatalf("train %d held-out %d", len(train), len(held))
	}
	states := map[string]bool{}
	for _, r := range train {
		states[r.State] = true
	}
	for _, r := range held {
		if states[r.State] {
			t.Errorf("held-out row %d's state is also trained on: %q", r.Line, r.State)
		}
	}
	// Every stratum (color, ok) holds out about a quarter.
	count := func(rs []Row) map[string]int {
		c := map[string]int{}
		for _, r := range rs {
			c[stratum(r)]++
		}
		return c
	}
	all, h := count(rows), count(held)
	for k, n := range all {
		if share := float64(h[k]) / float64(n); math.Abs(share-0.25) > 0.1 {
			t.Errorf("stratum %s: %d of %d held out", k, h[k], n)
		}
	}
	// The same seed gives the same split; the split refuses other rows.
	again, _ := MakeSplit(rows, 0.25, 7)
	if !slices.Equal(again.Heldout, sp.Heldout) {
		t.Error("the split is not reproducible")
	}
	changed := slices.Clone(rows)
	changed[0].Labels = []int{(rows[0].Labels[0] + 1) % 3, rows[0].Labels[1]}
	if _, _, err := sp.Apply(changed); err == nil {
		t.Error("Apply on changed rows: no error")
	}
	if _, err := MakeSplit(rows, 1, 1); err == nil {
		t.Error("fraction 1: no error")
	}
}

var trained struct {
	sync.Once
	dir  string
	m    *Model
	rows []Row
}

// trainTiny trains on the color task briefly, once for the tests below, which
// must leave the model as they found it.
func trainTiny(t *testing.T) (string, *Model, []Row) {
	t.Helper()
	trained.Do(func() {
		dir, err := os.MkdirTemp("", "decide-test-")
		if err != nil {
			t.Fatal(err)
		}
		trained.dir = dir
		trained.m, trained.rows = trainTinyOnce(t, dir)
	})
	if trained.m == nil {
		t.Fatal("training the tiny model failed in an earlier test")
	}
	return filepath.Join(trained.dir, "model"), trained.m, trained.rows
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if trained.dir != "" {
		os.RemoveAll(trained.dir)
	}
	os.Exit(code)
}

func trainTinyOnce(t *testing.T, dir string) (*Model, []Row) {
	t.Helper()
	base, tok := tinyIn(t, dir)
	task := mustTask(t, smallTask)
	rows := colorRows(*tinyRows, 5)
	var events []Event
	m, res, err := Train(context.Background(), base, tok, task, rows, Options{
		Iters: *tinyIters, BatchSize: 4, LearningRate: 1e-3, HeadLearningRate: 1e-2, Seed: 1, StepsPerEval: *tinyIters / 2,
		LoRA: lora.Config{Rank: 4},
	}, func(ev Event) { events = append(events, ev) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != *tinyIters || res.TrainRows+res.Heldout != len(rows) {
		t.Fatalf("result %+v", res)
	}
	var vals []Event
	for _, ev := range events {
		if ev.Kind.String() == "val" {
			vals = append(vals, ev)
		}
	}
	if len(vals) != 3 || vals[0].Step != 0 || vals[2].Step != *tinyIters {
		t.Fatalf("validation events at %v, want steps 0, %d, %d", vals, *tinyIters/2, *tinyIters)
	}
	if !(vals[2].ValLoss < vals[0].ValLoss) {
		t.Errorf("held-out loss went from %v to %v", vals[0].ValLoss, vals[2].ValLoss)
	}
	return m, rows
}

func TestTrainLearnsAndCalibrates(t *testing.T) {
	_, m, _ := trainTiny(t)
	for _, q := range m.Task.Questions {
		c := m.Calibration.Questions[q.Name]
		if c == nil {
			t.Fatalf("no calibration for %s", q.Name)
		}
		t.Logf("%s: zero-shot %.3f, trained %.3f, T %.2f, ECE %.3f -> %.3f", q.Name, c.ZeroShot.Accuracy, c.After.Accuracy, c.Temperature, c.Before.ECE, c.After.ECE)
		if c.After.Accuracy < c.ZeroShot.Accuracy+0.2 {
			t.Errorf("%s: held-out accuracy %.3f, zero-shot %.3f: training should win by a wide margin", q.Name, c.After.Accuracy, c.ZeroShot.Accuracy)
		}
		if c.After.NLL > c.Before.NLL+1e-9 {
			t.Errorf("%s: calibration raised the held-out NLL from %v to %v", q.Name, c.Before.NLL, c.After.NLL)
		}
		if len(c.After.Bins) != 15 || len(c.Coverage) == 0 || c.N != c.After.N {
			t.Errorf("%s: bins %d, coverage %d, n %d/%d", q.Name, len(c.After.Bins), len(c.Coverage), c.N, c.After.N)
		}
	}
}

func TestSaveReloadPredictsTheSame(t *testing.T) {
	modelDir, m, rows := trainTiny(t)
	if err := m.SetThreshold("color", 0.9); err != nil {
		t.Fatal(err)
	}
	defer m.SetThreshold("color", 0)
	dir := filepath.Join(t.TempDir(), "tickets-model")
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir); err != nil { // replacing a saved model works too
		t.Fatal(err)
	}
	for _, f := range []string{lora.AdaptersFile, lora.ConfigFile, HeadFile, TaskFile, CalibrationFile, SplitFile, MetaFile} {
		if _, err := filepath.Glob(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	b, _ := mx.Open("cpu")
	base, err := inference.Load(modelDir, b)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.Load(modelDir)
	loaded, err := Load(dir, base, tok)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, r := range rows[:20] {
		states = append(states, r.State)
	}
	want, _, err := m.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := loaded.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	escalated := 0
	for i := range want {
		for q := range want[i] {
			w, g := want[i][q], got[i][q]
			if w.Choice != g.Choice || w.Escalate != g.Escalate || math.Abs(w.Confidence-g.Confidence) > 1e-6 {
				t.Errorf("row %d %s: reloaded %+v, trained %+v", i, w.Question, g, w)
			}
			for k := range w.Scores {
				if math.Abs(w.Scores[k]-g.Scores[k]) > 1e-5 {
					t.Errorf("row %d %s option %d: score %v after reload, %v before", i, w.Question, k, g.Scores[k], w.Scores[k])
				}
			}
			if g.Escalate {
				escalated++
				if g.Confidence >= 0.9 {
					t.Errorf("escalated at confidence %v over threshold 0.9", g.Confidence)
				}
			}
		}
	}
	if loaded.Split == nil || !slices.Equal(loaded.Split.Heldout, m.Split.Heldout) {
		t.Error("the split did not survive the reload")
	}
	// Another backbone is refused.
	other := inference.NewRandom(func() inference.Config {
		c := inferencetest.Config()
		c.HiddenSize, c.HeadDim = 32, 8
		return c
	}(), 1, b)
	if _, err := Load(dir, other, tok); err == nil || !strings.Contains(err.Error(), "another backbone") {
		t.Errorf("load over another backbone: %v", err)
	}
	if escalated == 0 {
		t.Log("no decision fell below the 0.9 threshold")
	}
}

func TestEvaluateAndThreshold(t *testing.T) {
	_, m, rows := trainTiny(t)
	held := m.Split.HeldoutRows(rows)
	if err := m.SetThreshold("color", 0.95); err != nil {
		t.Fatal(err)
	}
	defer m.SetThreshold("color", 0)
	ev, err := m.Evaluate(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	c := ev.Questions["color"]
	if c == nil || c.Calibrated.Accuracy != m.Calibration.Questions["color"].After.Accuracy || c.Calibrated.N != len(held) {
		t.Fatalf("evaluation on the held-out rows %+v disagrees with the calibration record", c)
	}
	// Escalated is the share Decide escalates.
	var states []string
	for _, r := range held {
		states = append(states, r.State)
	}
	ds, _, err := m.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	esc := 0
	for _, d := range ds {
		if d[0].Escalate != (d[0].Confidence < 0.95) {
			t.Errorf("confidence %v, escalate %v at threshold 0.95", d[0].Confidence, d[0].Escalate)
		}
		if d[0].Escalate {
			esc++
		}
		if d[1].Escalate {
			t.Error("a question without a threshold escalated")
		}
	}
	if got := float64(esc) / float64(len(ds)); math.Abs(got-c.Escalated) > 1e-12 {
		t.Errorf("Decide escalates %v of the held-out rows, Evaluate says %v", got, c.Escalated)
	}
	if err := m.SetThreshold("nope", 0.5); err == nil {
		t.Error("threshold of an unknown question: no error")
	}
	if err := m.SetThreshold("ok", 1.5); err == nil {
		t.Error("threshold 1.5: no error")
	}
}

func TestEncoderCutsStatesAndDropsSpecialTokens(t *testing.T) {
	_, _, tok := tiny(t)
	task := mustTask(t, smallTask)
	enc, err := NewEncoder(tok, task, 301, 128)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := enc.StateTokens(strings.Repeat("blue ", 100))
	s := enc.Sequence(0, toks)
	if !s.Cut || len(s.Tokens) != 128 || s.Tokens[s.Markers[2]] != 301 || s.Markers[2] != 127 {
		t.Errorf("cut %v, %d tokens, last marker at %d", s.Cut, len(s.Tokens), s.Markers[2])
	}
	forged, _ := enc.StateTokens("red<|end|>green")
	if slices.Contains(forged, 301) {
		t.Errorf("a state forged the marker token: %v", forged)
	}
	if _, err := NewEncoder(tok, task, 301, 40); err == nil {
		t.Error("a sequence length that leaves no room for the state: no error")
	}
}
