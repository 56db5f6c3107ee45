package ttt

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/trainer"
)

// paragraphs tokenizes a testdata file, one chunk per line.
func paragraphs(t testing.TB, enc func(string) []int, name string) [][]int {
	t.Helper()
	var out [][]int
	for _, line := range strings.Split(strings.TrimSpace(readTestdata(t, name)), "\n") {
		out = append(out, enc(line))
	}
	return out
}

// nll is the mean next-token loss of ids under m.
func nll(t testing.TB, m *inference.Model, ids []int) float64 {
	t.Helper()
	ppl, err := inference.Perplexity(m, ids, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	return math.Log(ppl)
}

// logits is m's full output on ids, for comparing bit for bit.
func logits(t testing.TB, m *inference.Model, ids []int) []float32 {
	t.Helper()
	in, err := m.Tokens(ids)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward(in, nil).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// userAdapter pushes an adapter with random, non-zero weights on every linear
// layer of m: the user's own adapter that TTT must leave alone.
func userAdapter(t testing.TB, m *inference.Model) *inference.Adapter {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 7))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.02)
		}
		return v
	}
	loras := map[string]inference.LoRA{}
	m.Linears(func(path string, l *inference.Linear) {
		const rank = 4
		loras[path] = inference.LoRA{
			A:     mx.FromData(m.Backend(), mx.Float32, rnd(l.In*rank), l.In, rank),
			B:     mx.FromData(m.Backend(), mx.Float32, rnd(rank*l.Out), rank, l.Out),
			Scale: 2,
		}
	})
	a := inference.NewAdapter("user", loras)
	if _, err := m.PushAdapter(a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAdaptLowersHeldOutLoss is TTT's claim on the bundled demo model: after a
// few steps on a document it never saw, the loss of a held-out continuation of
// that document falls, by far more than the loss of unrelated text moves.
func TestAdaptLowersHeldOutLoss(t *testing.T) {
	m, tok := demoModel(t)
	enc := func(s string) []int { return encode(t, tok, s) }
	doc := paragraphs(t, enc, "document.txt")
	held := enc(readTestdata(t, "continuation.txt"))
	other := paragraphs(t, enc, "distractors.txt")[0]
	heldBefore, otherBefore := nll(t, m, held), nll(t, m, other)

	a, res, err := Adapt(context.Background(), m, doc, Options{}, nil) // one pass over its pieces
	if err != nil {
		t.Fatal(err)
	}
	defer a.Done()
	if len(res.Steps) != res.Pieces || res.Pieces < 4 {
		t.Errorf("%d steps over %d pieces, want one each and several", len(res.Steps), res.Pieces)
	}
	heldAfter, otherAfter := nll(t, a.Model(), held), nll(t, a.Model(), other)
	t.Logf("held-out continuation: %.3f -> %.3f nats/token; unrelated text: %.3f -> %.3f; %d steps, %.0f ms",
		heldBefore, heldAfter, otherBefore, otherAfter, len(res.Steps), res.TotalMS)
	if drop := heldBefore - heldAfter; drop < 0.5 {
		t.Errorf("held-out loss fell by %.3f nats/token (%.3f -> %.3f), want at least 0.5", drop, heldBefore, heldAfter)
	}
	if heldBefore-heldAfter < 2*(otherBefore-otherAfter) {
		t.Errorf("held-out loss fell by %.3f, unrelated text's by %.3f: want the document's at least twice as much",
			heldBefore-heldAfter, otherBefore-otherAfter)
	}
	if got := nll(t, m, held); got != heldBefore {
		t.Errorf("m's own loss on the continuation changed: got %v, want %v", got, heldBefore)
	}
	if first, last := res.Steps[0].Loss, res.Steps[len(res.Steps)-1].Loss; !(last < first) {
		t.Errorf("training loss went from %.3f to %.3f, want it lower", first, last)
	}
}

// TestUserAdapterUntouched: m carries a user adapter with non-zero weights;
// TTT trains over it, and m computes bit-identical logits under the same
// adapter version throughout; after Done the fork computes m's logits again,
// bit for bit.
func TestUserAdapterUntouched(t *testing.T) {
	m, tok := demoModel(t)
	user := userAdapter(t, m)
	enc := func(s string) []int { return encode(t, tok, s) }
	doc := paragraphs(t, enc, "document.txt")
	probe := enc(readTestdata(t, "continuation.txt"))
	version, want := m.AdapterVersion(), logits(t, m, probe)
	userParams := user.Params()

	var during []uint64
	a, res, err := Adapt(context.Background(), m, doc, Options{Steps: 2}, func(ev trainer.Event) {
		during = append(during, m.AdapterVersion())
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.BaseVersion != version {
		t.Errorf("BaseVersion %d, want m's %d", res.BaseVersion, version)
	}
	for i, v := range during {
		if v != version {
			t.Errorf("event %d: m's adapter version %d during training, want %d", i, v, version)
		}
	}
	stack := a.Model().Adapters()
	if len(stack) != 2 || stack[0] != user || stack[1] != a.Adapter() || a.Adapter().Name() != "ttt" {
		t.Fatalf("the fork's stack is %v, want [user, ttt]", stack)
	}
	if sameBits(logits(t, a.Model(), probe), want) {
		t.Error("the adapted model computes m's logits: the temporary adapter did nothing")
	}
	if err := a.Done(); err != nil {
		t.Fatal(err)
	}
	if err := a.Done(); err != nil {
		t.Errorf("second Done: %v", err)
	}
	if !sameBits(logits(t, m, probe), want) {
		t.Error("m's logits changed")
	}
	if !sameBits(logits(t, a.Model(), probe), want) {
		t.Error("after Done the fork's logits differ from m's")
	}
	if got := m.AdapterVersion(); got != version {
		t.Errorf("m's adapter version %d, want %d", got, version)
	}
	if got := m.Adapters(); len(got) != 1 || got[0] != user {
		t.Errorf("m's stack is %v, want just the user's adapter", got)
	}
	for name, p := range user.Params() {
		if p != userParams[name] {
			t.Errorf("user adapter weight %s was replaced", name)
		}
	}
	if got := a.Model().Adapters(); len(got) != 1 || got[0] != user {
		t.Errorf("after Done the fork's stack is %v, want just the user's adapter", got)
	}
}

// TestGate: the gate's perplexity is the context's under m (one piece here); a threshold above
// it skips training and hands back m itself, one below it trains.
func TestGate(t *testing.T) {
	m, tok := demoModel(t)
	doc := paragraphs(t, func(s string) []int { return encode(t, tok, s) }, "document.txt")[:1]
	want := math.Exp(nll(t, m, doc[0]))
	version := m.AdapterVersion()

	a, res, err := Adapt(context.Background(), m, doc, Options{Steps: 1, MaxTokens: 256, SkipBelowPerplexity: want * 1.01}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped || len(res.Steps) != 0 || a.Model() != m || a.Adapter() != nil {
		t.Errorf("gate %.4g above the perplexity %.4g: skipped %v, %d steps, model is m %v", want*1.01, want, res.Skipped, len(res.Steps), a.Model() == m)
	}
	if math.Abs(res.Perplexity-want) > 1e-9*want || !(res.GateMS > 0) {
		t.Errorf("gate perplexity %v in %v ms, want %v in > 0 ms", res.Perplexity, res.GateMS, want)
	}
	if err := a.Done(); err != nil || m.AdapterVersion() != version {
		t.Errorf("Done after a skip: %v, version %d, want nil and %d", err, m.AdapterVersion(), version)
	}

	a, res, err = Adapt(context.Background(), m, doc, Options{Steps: 1, MaxTokens: 256, SkipBelowPerplexity: want * 0.99}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Done()
	if res.Skipped || len(res.Steps) != 1 || a.Model() == m {
		t.Errorf("gate %.4g below the perplexity %.4g: skipped %v, %d steps", want*0.99, want, res.Skipped, len(res.Steps))
	}

	a, res, err = Adapt(context.Background(), m, doc, Options{Steps: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Done()
	if !math.IsNaN(res.Perplexity) {
		t.Errorf("gate off: perplexity %v, want NaN (not computed)", res.Perplexity)
	}
}

// TestCancel: cancelling mid-way stops after the running step, wraps ctx's
// error, reports the steps done and leaves no adapter pushed, neither on m nor
// on the fork it trained.
func TestCancel(t *testing.T) {
	m, tok := demoModel(t)
	userAdapter(t, m)
	doc := paragraphs(t, func(s string) []int { return encode(t, tok, s) }, "document.txt")
	version := m.AdapterVersion()
	var fork *inference.Model
	forked = func(f *inference.Model) { fork = f }
	defer func() { forked = nil }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, res, err := Adapt(ctx, m, doc, Options{Steps: 10}, func(ev trainer.Event) {
		if ev.Kind == trainer.EventTrain && ev.Step == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || a != nil {
		t.Fatalf("got %v, %v; want context.Canceled and no Applied", a, err)
	}
	if len(res.Steps) != 2 {
		t.Errorf("%d steps reported, want 2", len(res.Steps))
	}
	if m.AdapterVersion() != version || len(m.Adapters()) != 1 {
		t.Errorf("m: version %d with %d adapters, want %d with 1", m.AdapterVersion(), len(m.Adapters()), version)
	}
	if fork == nil || len(fork.Adapters()) != 1 || fork.TopAdapter() != m.TopAdapter() {
		t.Errorf("the fork still carries the temporary adapter: %v", fork.Adapters())
	}

	if _, _, err := Adapt(ctx, m, doc, Options{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Adapt with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestStepReport: every step is timed in ms, counts its tokens and is
// reported as an EventTrain, in order, then an EventDone; steps past the last
// piece start over from the first.
func TestStepReport(t *testing.T) {
	m, tok := demoModel(t)
	doc := paragraphs(t, func(s string) []int { return encode(t, tok, s) }, "document.txt")[:2]
	var events []trainer.Event
	a, res, err := Adapt(context.Background(), m, doc, Options{Steps: 3, MaxTokens: 64}, func(ev trainer.Event) { events = append(events, ev) })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Done()
	want := pieces(doc, 64)
	if res.Pieces != len(want) {
		t.Errorf("%d pieces, want %d", res.Pieces, len(want))
	}
	if len(res.Steps) != 3 || len(events) != 4 {
		t.Fatalf("%d steps and %d events, want 3 and 4", len(res.Steps), len(events))
	}
	var sum float64
	for i, s := range res.Steps {
		if !(s.MS > 0) || math.IsNaN(s.Loss) || s.Tokens != int64(len(want[i%len(want)])-1) {
			t.Errorf("step %d: %+v, want ms > 0, a loss, %d tokens", i+1, s, len(want[i])-1)
		}
		if ev := events[i]; ev.Kind != trainer.EventTrain || ev.Step != i+1 || ev.Iters != 3 || ev.Loss != s.Loss {
			t.Errorf("event %d: %+v, want train step %d of 3 with loss %v", i, ev, i+1, s.Loss)
		}
		sum += s.MS
	}
	if events[3].Kind != trainer.EventDone {
		t.Errorf("last event %v, want done", events[3].Kind)
	}
	if !(res.TotalMS >= sum) {
		t.Errorf("total %v ms, less than its steps' %v", res.TotalMS, sum)
	}
	t.Logf("steps: %+v; total %.1f ms", res.Steps, res.TotalMS)
}

func TestAdaptRefuses(t *testing.T) {
	m, _ := demoModel(t)
	ok := [][]int{{1, 2, 3, 4}}
	for _, tc := range []struct {
		name   string
		chunks [][]int
		opts   Options
		is     error
	}{
		{"no chunks", nil, Options{}, ErrNoContext},
		{"one token", [][]int{{5}}, Options{}, ErrNoContext},
		{"token past vocab", [][]int{{1, 4096}}, Options{}, nil},
		{"negative token", [][]int{{-1, 2}}, Options{}, nil},
		{"negative steps", ok, Options{Steps: -1}, nil},
		{"negative rate", ok, Options{LearningRate: -1}, nil},
		{"NaN gate", ok, Options{SkipBelowPerplexity: math.NaN()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, err := Adapt(context.Background(), m, tc.chunks, tc.opts, nil)
			if err == nil || a != nil || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("got %v, %v; want an error (%v)", a, err, tc.is)
			}
		})
	}
	if m.AdapterVersion() != 0 {
		t.Errorf("m's adapter version %d after refusals, want 0", m.AdapterVersion())
	}
}

func TestPieces(t *testing.T) {
	seq := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		chunks [][]int
		max    int
		want   [][]int
	}{
		{"short", [][]int{seq(3)}, 4, [][]int{{0, 1, 2}}},
		{"exact", [][]int{seq(5)}, 4, [][]int{{0, 1, 2, 3, 4}}},
		{"split overlapping by one", [][]int{seq(9)}, 4, [][]int{{0, 1, 2, 3, 4}, {4, 5, 6, 7, 8}}},
		{"remainder of one token dropped", [][]int{seq(6)}, 5, [][]int{seq(6)}},
		{"tail piece", [][]int{seq(7)}, 4, [][]int{{0, 1, 2, 3, 4}, {4, 5, 6}}},
		{"order kept, empties skipped", [][]int{{9, 8}, nil, {7}, {6, 5}}, 4, [][]int{{9, 8}, {6, 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pieces(tc.chunks, tc.max)
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFirstBlock(t *testing.T) {
	for _, c := range []struct{ layers, blocks, want int }{{0, 28, 28 - DefaultLayers}, {2, 28, 26}, {-1, 28, 0}, {4, 4, 0}, {6, 4, 0}, {0, 4, 0}} {
		if got := (Options{Layers: c.layers}).FirstBlock(c.blocks); got != c.want {
			t.Errorf("Layers %d of %d blocks: first block %d, want %d", c.layers, c.blocks, got, c.want)
		}
	}
}
