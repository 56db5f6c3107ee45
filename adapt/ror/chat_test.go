package ror

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// chatFixture is the demo model with a tokenizer, and examples made of text.
func chatFixture(t *testing.T) (*inference.Model, func(prompt, reply string) ChatExample) {
	t.Helper()
	m, tok := inferencetest.Load(t, inferencetest.Demo(t))
	cfg := m.Config()
	eos := cfg.StopTokens()
	return m, func(prompt, reply string) ChatExample {
		return ChatExample{Prompt: encode(t, tok, prompt), Reply: append(encode(t, tok, reply), eos[0])}
	}
}

// chatLearner is a learner on the demo model, and chatFixture's examples.
func chatLearner(t *testing.T, opts ChatOptions) (*ChatLearner, func(prompt, reply string) ChatExample) {
	t.Helper()
	m, ex := chatFixture(t)
	l, err := NewChat(m, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, ex
}

func encode(t *testing.T, tok *tokenizer.Tokenizer, s string) []int {
	t.Helper()
	ids, err := tok.Encode(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// logits are m's last-position logits for ids.
func logits(t *testing.T, m *inference.Model, ids []int) []float32 {
	t.Helper()
	x, err := m.Tokens(ids)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.ForwardLast(x, nil).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Chat RoR on the demo model: the learner's adapter changes nothing until a
// correction; a thumb up changes no weights; a correction flips the model's
// preference within MaxSteps and passes a lenient anchor check; undo restores
// the logits bit for bit; a correction that fights the anchor set under a
// strict margin is rolled back and leaves the weights as they were.
func TestChatLearner(t *testing.T) {
	ctx := context.Background()
	m, ex := chatFixture(t)
	probe := ex("The hacker fixed the build before", " breakfast.").Prompt
	plain := logits(t, m, probe)
	l, err := NewChat(m, nil, ChatOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := logits(t, m, probe); !slices.Equal(got, plain) {
		t.Fatal("the fresh correction adapter changed the model's output")
	}
	good := []ChatExample{
		ex("User: Tell me about computers.\nAssistant:", " A computer runs programs."),
		ex("User: What is a program?\nAssistant:", " A program is a list of instructions for a computer."),
		ex("User: Who fixes bugs?\nAssistant:", " The hacker fixes the bugs."),
	}
	for _, g := range good {
		ev, err := l.ThumbUp(ctx, g, 0.6)
		if err != nil || ev.Kind != KindReinforce || ev.VersionAfter != ev.VersionBefore {
			t.Fatalf("thumb up: %+v, %v", ev, err)
		}
	}
	if l.Anchors() != 2 || l.ReplayLen() != 1 || l.Version() != 0 {
		t.Fatalf("after three thumbs up: %d anchors, %d replay, version %d", l.Anchors(), l.ReplayLen(), l.Version())
	}
	if got := logits(t, m, probe); !slices.Equal(got, plain) {
		t.Fatal("a thumb up changed the weights")
	}
	if a, low := l.Adjusted(0.6); a <= 0.6 || low {
		t.Errorf("three confirmations at 0.6: adjusted %v, escalate %v", a, low)
	}

	wrong := ex("User: What colour is the sea?\nAssistant:", " The sea is a program.")
	ev, err := l.ThumbDown(ctx, wrong, 0.3, ex("", " The sea is blue.").Reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("correction: %+v", ev)
	if ev.Kind != KindRetrain || !ev.Flipped || ev.Steps > DefaultMaxSteps || ev.LossAfter >= ev.Loss || ev.VersionAfter != 1 {
		t.Fatalf("the correction did not take: %+v", ev)
	}
	if ev.StepMS <= 0 || ev.FlipMS <= 0 || ev.CheckMS <= 0 || math.IsNaN(ev.AnchorAfter) || ev.AnchorBefore-ev.AnchorAfter > DefaultChatAnchorMargin {
		t.Errorf("timings or anchor: %+v", ev)
	}
	moved := logits(t, m, probe)
	if slices.Equal(moved, plain) {
		t.Error("a kept correction changed nothing")
	}
	if u, err := l.Undo(); err != nil || u.VersionAfter != 0 {
		t.Fatalf("undo: %+v, %v", u, err)
	}
	if got := logits(t, m, probe); !slices.Equal(got, plain) {
		t.Fatal("undo did not restore the logits bit for bit")
	}
	if _, err := l.RestoreVersion(1); err != nil {
		t.Fatal(err)
	}
	if got := logits(t, m, probe); !slices.Equal(got, moved) {
		t.Fatal("restoring version 1 did not give its logits back")
	}
	if _, err := l.Undo(); err != nil {
		t.Fatal(err)
	}

	// A harmful correction: nonsense taught for a confirmed conversation. Under
	// the default margin it is rolled back, and nothing changes.
	strict, err := NewChat(m, nil, ChatOptions{Seed: 3}) // the default margin
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.AddAnchor(ctx, good...); err != nil {
		t.Fatal(err)
	}
	before := logits(t, m, probe)
	ev, err = strict.ThumbDown(ctx, good[1], 0.3, ex("", " sea sea sea breakfast breakfast hacker hacker").Reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("harmful: %+v", ev)
	if ev.Kind != KindRollback || ev.VersionAfter != ev.VersionBefore || strict.Version() != 0 {
		t.Fatalf("the harmful correction was kept: %+v", ev)
	}
	if got := logits(t, m, probe); !slices.Equal(got, before) {
		t.Fatal("a rolled-back step left the weights changed")
	}
	// 👎 alone records and escalates.
	ev, err = strict.ThumbDown(ctx, wrong, 0.45, nil)
	if err != nil || ev.Kind != KindRecord || !ev.Escalate || ev.Adjusted >= 0.45 {
		t.Errorf("thumb down alone: %+v, %v", ev, err)
	}
	// Hostile tokens are refused before anything runs.
	if _, err := strict.ThumbUp(ctx, ChatExample{Prompt: []int{1}, Reply: []int{1 << 30}}, 0.5); err == nil {
		t.Error("a token outside the vocabulary was taken")
	}
}

// A long chat's confirmations keep the learner bounded: the anchor set stops
// at maxAnchors (the newest), only the newest replay items keep their
// prefixes, and a confirmation scores only the new anchor.
func TestChatLearnerStaysBounded(t *testing.T) {
	ctx := context.Background()
	l, ex := chatLearner(t, ChatOptions{Seed: 1})
	for i := range 3 * maxAnchors {
		e := ex(fmt.Sprintf("User: question %d about the build?\nAssistant:", i), " The hacker fixed it.")
		if _, err := l.ThumbUp(ctx, e, 0.6); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if _, err := l.ThumbDown(ctx, e, 0.3, ex("", " It was fixed.").Reply); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := l.Anchors(); n != maxAnchors {
		t.Errorf("%d anchors after %d confirmations, want the cap %d", n, 3*maxAnchors, maxAnchors)
	}
	cached := 0
	for _, it := range l.replay {
		if it.h != nil {
			cached++
		}
	}
	if cached > cachedReplay {
		t.Errorf("%d replay items keep a prefix, want at most %d", cached, cachedReplay)
	}
	for _, it := range l.anchor {
		if it.score == nil {
			t.Fatal("an anchor without its score")
		}
	}
}

// The corrections a learner saved come back: a learner made from them on a
// fresh copy of the model answers exactly as the first did.
func TestChatLearnerSaveAndContinue(t *testing.T) {
	ctx := context.Background()
	m, ex := chatFixture(t)
	l, err := NewChat(m, nil, ChatOptions{Seed: 2, AnchorMargin: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := l.ThumbDown(ctx, ex("User: What colour is the sea?\nAssistant:", " A program."), 0.3, ex("", " The sea is blue.").Reply)
	if err != nil || ev.Kind != KindRetrain {
		t.Fatalf("correction: %+v, %v", ev, err)
	}
	dir := t.TempDir()
	if err := l.Save(dir); err != nil {
		t.Fatal(err)
	}
	probe := ex("User: What colour is the sea?\nAssistant:", "").Prompt
	want := logits(t, m, probe)
	m2, _ := chatFixture(t)
	plain := logits(t, m2, probe)
	l2, err := NewChatFrom(m2, nil, ChatOptions{Seed: 2}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := logits(t, m2, probe); !slices.Equal(got, want) || slices.Equal(got, plain) {
		t.Error("a learner made from the saved corrections does not answer as the first one")
	}
	if l2.Version() != 0 {
		t.Errorf("version %d, want 0", l2.Version())
	}
	if _, err := NewChatFrom(m2, nil, ChatOptions{Rank: 4}, dir); err == nil {
		t.Error("corrections of another rank were taken")
	}
}

// The retrain step's one padded batch (stepBatch) gives the loss and the update
// of one micro-batch per item, the correction weighing as much as the replay
// together: checked with SGD, whose update is the gradient itself, on items of
// three different lengths (so two are padded).
func TestChatStepBatch(t *testing.T) {
	ctx := context.Background()
	l, ex := chatLearner(t, ChatOptions{})
	fix := l.item(ex("What is a hacker?", "Someone who enjoys exploring the details of programmable systems."))
	replay := []*chatItem{
		l.item(ex("Tell me about computers, and about the people who program them late at night, and about the long nights of a hacker.", "They are machines.")),
		l.item(ex("Why?", "Because programs have bugs, and the bugs have programs of their own.")),
	}
	items := append([]*chatItem{fix}, replay...)
	if err := l.prefix(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if fix.bt.L == replay[0].bt.L || fix.bt.L == replay[1].bt.L || replay[0].bt.L == replay[1].bt.L {
		t.Fatalf("want three lengths, got %d, %d, %d", fix.bt.L, replay[0].bt.L, replay[1].bt.L)
	}
	step := func(batches []trainer.Batch) (float64, map[string][]float32) {
		st := trainer.Stepper{Bind: trainer.Adapters(l.m), Optimizer: optim.NewSGD(optim.Constant(1))}
		sr, err := st.Step(ctx, l.current.params, batches)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for name, a := range sr.Params {
			v, err := a.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			out[name] = v
		}
		return sr.Loss, out
	}
	one := func(it *chatItem, w float32) trainer.Batch { // the item alone: its mean loss over its reply
		return trainer.Batch{Weight: w, Tokens: int64(it.bt.L), Loss: func(m *inference.Model, _ map[string]*mx.Array) *mx.Array {
			b, n := m.Backend(), it.replyLen()
			ones := make([]float32, n)
			for i := range ones {
				ones[i] = 1
			}
			return mx.CrossEntropyMasked(m.Suffix(it.h, l.cut, it.first), mx.FromData(b, mx.Int32, it.bt.Targets[it.first:], 1, n), mx.FromData(b, mx.Float32, ones, 1, n))
		}}
	}
	nFix := float32(fix.replyLen())
	before := map[string][]float32{}
	for name, a := range l.current.params {
		v, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		before[name] = v
	}
	for _, rp := range [][]*chatItem{nil, replay} {
		want := []trainer.Batch{one(fix, nFix)}
		for _, r := range rp {
			want = append(want, one(r, nFix/float32(len(rp))))
		}
		wl, wp := step(want)
		gl, gp := step([]trainer.Batch{l.stepBatch(fix, rp)})
		if math.Abs(gl-wl) > 1e-5*math.Abs(wl) {
			t.Errorf("%d replay items: loss %g in one batch, %g in micro-batches", len(rp), gl, wl)
		}
		var worst, moved float64
		for name, w := range wp {
			b := before[name]
			for i := range w {
				moved = math.Max(moved, math.Abs(float64(w[i]-b[i])))
				worst = math.Max(worst, math.Abs(float64(gp[name][i]-w[i])))
			}
		}
		if moved == 0 || worst > 1e-4*moved {
			t.Errorf("%d replay items: the one batch's update is off by %g, against a largest move of %g", len(rp), worst, moved)
		}
	}
}

// Scores taken in padded groups (scoreItems) are each item's alone: its reply
// tokens, their summed loss and how many the model ranks first, over items of
// several lengths that take several groups, one reply longer than a group.
func TestChatScoreBatch(t *testing.T) {
	ctx := context.Background()
	l, ex := chatLearner(t, ChatOptions{})
	var items []*chatItem
	rows := 0
	for i, q := range []string{"What is a hacker?", "Tell me about computers.", "Why do programs have bugs, and who fixes them?", "Hi", "What is a good program?", "Where is the file?"} {
		reply := fmt.Sprintf("Answer %d: %s", i, strings.Repeat("a machine that writes about its own programs. ", 2+11*(i%3)))
		it := l.item(ex(q, reply))
		items, rows = append(items, it), rows+it.replyLen()
	}
	if rows <= 2*scoreRows || items[1].replyLen() <= scoreRows {
		t.Fatalf("want several groups and a reply longer than one (%d positions), got %d positions, the longest reply %d", scoreRows, rows, items[1].replyLen())
	}
	got, err := l.scoreItems(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	b := l.m.Backend()
	for i, it := range items {
		logits := l.m.Suffix(it.h, l.cut, it.first) // the item alone
		k := it.replyLen()
		ce, err := mx.CrossEntropy(mx.Reshape(logits, k, -1), mx.FromData(b, mx.Int32, it.bt.Targets[it.first:], k)).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		am, err := mx.ArgMax(logits, -1, false).Int32s()
		if err != nil {
			t.Fatal(err)
		}
		var want itemScore
		for j := range k {
			want.n++
			want.loss += float64(ce[j])
			if am[j] == it.bt.Targets[it.first+j] {
				want.right++
			}
		}
		if g := got[i]; g.n != want.n || g.right != want.right || math.Abs(g.loss-want.loss) > 1e-5*want.loss {
			t.Errorf("item %d (%d tokens): scored %+v in a group, %+v alone", i, it.bt.L, g, want)
		}
	}
}
