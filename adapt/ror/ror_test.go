package ror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/training/calibrate"
	"github.com/inloop/inloop/training/decide"
)

// optionName is question qi's option k.
func optionName(qi, k int) string { return fixture.task.Questions[qi].Options[k].Name }

// remember seeds l's replay buffer with rows, their features from the
// fixture's cache (the fitted rows are cached by setup).
func remember(t *testing.T, l *Learner, rows []decide.Row) {
	t.Helper()
	if err := l.Remember(rows); err != nil {
		t.Fatal(err)
	}
	scored(t, l, rows) // fills the cache
	for _, it := range l.replay {
		if f := fixture.cache[cacheKey{it.question, it.state}]; f != nil {
			it.feat = f
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"defaults", Options{}, true},
		{"threshold above 1", Options{Threshold: 1.5}, false},
		{"negative steps", Options{MaxSteps: -1}, false},
		{"negative rate", Options{LearningRate: -1}, false},
		{"NaN rate", Options{LearningRate: math.NaN()}, false},
		{"no replay", Options{Replay: -1}, true},
		{"replay below -1", Options{Replay: -2}, false},
		{"negative margin", Options{AnchorMargin: -0.5}, false},
		{"negative history", Options{History: -3}, false},
	} {
		err := tc.opts.withDefaults().validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// New refuses a model its copy of the head does not reproduce: here the
// decision model is loaded over a random backbone of the demo's shape while
// the Learner is given the demo itself.
func TestNewRefusesAModelItDoesNotReproduce(t *testing.T) {
	setup(t)
	other := inference.NewRandom(fixture.base.Config(), 7, fixture.base.Backend())
	m, err := decide.Load(fixture.dir, other, fixture.tok)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), m, fixture.base, fixture.tok, fixture.rows[anchorFrom:anchorFrom+2], Options{})
	if !errors.Is(err, ErrHeadMismatch) {
		t.Fatalf("New over another backbone: %v, want ErrHeadMismatch", err)
	}
}

// The Learner answers as decide does: same choices, same scores (to float
// rounding; the batches differ), same calibrated probabilities.
func TestDecideMatchesDecide(t *testing.T) {
	l := learner(t, Options{})
	states := []string{fixture.rows[heldFrom].State, fixture.rows[heldFrom+1].State, fixture.rows[heldFrom+2].State}
	got, _, err := l.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := l.m.Decide(context.Background(), states)
	if err != nil {
		t.Fatal(err)
	}
	for i := range states {
		for q := range want[i] {
			g, w := got[i][q], want[i][q]
			if g.Choice != w.Choice || math.Abs(g.Confidence-w.Confidence) > 1e-4 {
				t.Errorf("state %d %s: %s at %.5f, decide %s at %.5f", i, w.Question, g.Choice, g.Confidence, w.Choice, w.Confidence)
			}
			for k := range w.Scores {
				if math.Abs(g.Scores[k]-w.Scores[k]) > 1e-4*max(1, math.Abs(w.Scores[k])) {
					t.Errorf("state %d %s option %d: score %v, decide %v", i, w.Question, k, g.Scores[k], w.Scores[k])
				}
			}
		}
	}
}

// A wrong decision, corrected once, flips within MaxSteps (3) steps, and the
// anchor accuracy does not drop by more than a point.
func TestCorrectionFlips(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	remember(t, l, fixture.rows[:fitRows])
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	if len(ws) < 8 {
		t.Fatalf("the fixture gets %d team decisions wrong; the test needs 8", len(ws))
	}
	flipped := 0
	for i, w := range ws[:8] {
		ev, err := l.ThumbDown(ctx, w.state, "team", optionName(0, w.label))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("correction %d: %s after %d steps, flipped %v, loss %.3f → %.3f, anchor %.4f → %.4f, %.1f ms (steps %.1f, check %.1f)",
			i, ev.Kind, ev.Steps, ev.Flipped, ev.Loss, ev.LossAfter, ev.AnchorBefore, ev.AnchorAfter, ev.MS, ev.StepMS, ev.CheckMS)
		if ev.Steps < 1 || ev.Steps > DefaultMaxSteps {
			t.Errorf("correction %d: %d steps, want 1 to %d", i, ev.Steps, DefaultMaxSteps)
		}
		if ev.Kind == KindRetrain {
			if drop := ev.AnchorBefore - ev.AnchorAfter; drop > 0.01 {
				t.Errorf("correction %d kept with anchor accuracy %.4f → %.4f", i, ev.AnchorBefore, ev.AnchorAfter)
			}
			if ev.VersionAfter <= ev.VersionBefore || l.Version() != ev.VersionAfter {
				t.Errorf("correction %d: versions %d → %d, current %d", i, ev.VersionBefore, ev.VersionAfter, l.Version())
			}
		}
		if i == 0 {
			// The first one is the must-show: kept, flipped, in the answer Decide gives.
			if ev.Kind != KindRetrain || !ev.Flipped {
				t.Fatalf("the first correction: %s, flipped %v", ev.Kind, ev.Flipped)
			}
			ds, _, err := l.Decide(ctx, []string{w.state})
			if err != nil {
				t.Fatal(err)
			}
			if got := ds[0][0].Choice; got != optionName(0, w.label) {
				t.Errorf("after the correction Decide answers %s, want %s", got, optionName(0, w.label))
			}
		}
		if ev.Flipped && ev.Kind == KindRetrain {
			flipped++
		}
		if ev.Kind == KindRetrain { // each correction from the same model
			if _, err := l.Undo(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of 8 corrections flipped and kept", flipped)
	if flipped < 5 {
		t.Errorf("%d of 8 corrections flipped and kept, want at least 5", flipped)
	}
}

// A harmful correction — confidently right tickets relabelled to a team that
// is wrong for them — hurts the anchor set and is rolled back: the weights and
// the answers stay bit for bit what they were, and no version is made.
func TestHarmfulCorrectionRolledBack(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	// The billing tickets the model is surest of, all relabelled technical.
	items := scored(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	_, s := accuracy(t, l, items)
	type pick struct {
		it   *item
		conf float64
	}
	var right []pick
	for i, it := range items {
		if argmax(s[i]) == it.label && optionName(0, it.label) == "billing" {
			right = append(right, pick{it, slices.Max(calibrate.Softmax(s[i], 1))})
		}
	}
	slices.SortFunc(right, func(a, b pick) int { return cmp.Compare(b.conf, a.conf) })
	if len(right) < 8 {
		t.Fatalf("%d right billing decisions, want 8", len(right))
	}
	var harm []Example
	for _, p := range right[:8] {
		harm = append(harm, Example{State: p.it.state, Question: "team", Answer: "technical"})
	}
	probe := []string{fixture.rows[heldFrom].State, fixture.rows[heldFrom+1].State}
	headBefore, answersBefore := headBits(t, l.current.head), decideBits(t, l, probe)

	ev, err := l.Retrain(ctx, harm)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("harmful correction: %s after %d steps, anchor %.4f → %.4f (%s), %.1f ms", ev.Kind, ev.Steps, ev.AnchorBefore, ev.AnchorAfter, ev.Detail, ev.MS)
	if ev.Kind != KindRollback || ev.VersionAfter != ev.VersionBefore || l.Version() != 0 {
		t.Fatalf("harmful correction: %s, version %d → %d, want a rollback at version 0", ev.Kind, ev.VersionBefore, ev.VersionAfter)
	}
	if !(ev.AnchorBefore-ev.AnchorAfter > 0.01) {
		t.Errorf("rolled back with anchor accuracy %.4f → %.4f", ev.AnchorBefore, ev.AnchorAfter)
	}
	if got := headBits(t, l.current.head); !equalBits(got, headBefore) {
		t.Error("the head changed although the step was rolled back")
	}
	if got := decideBits(t, l, probe); !slices.Equal(got, answersBefore) {
		t.Errorf("answers after the rollback %v, before %v", got, answersBefore)
	}
	if vs := l.Versions(); !slices.Equal(vs, []uint64{0}) {
		t.Errorf("versions %v, want [0]", vs)
	}
	if _, err := l.Undo(); !errors.Is(err, ErrNothingToUndo) {
		t.Errorf("undo after a rollback: %v, want ErrNothingToUndo", err)
	}
	for _, e := range harm {
		for _, r := range l.replay {
			if r.state == e.State {
				t.Fatal("a rolled-back correction joined the replay buffer")
			}
		}
	}
}

func equalBits(a, b map[string][]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for n, x := range a {
		if !slices.Equal(x, b[n]) {
			return false
		}
	}
	return true
}

// 👍 changes no weights — the head bit for bit, the adapter and the version
// — but the example joins the replay buffer and the calibration history.
func TestThumbUpChangesNoWeights(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	r := fixture.rows[heldFrom+3]
	probe := []string{r.State}
	headBefore, answersBefore, adapterBefore := headBits(t, l.current.head), decideBits(t, l, probe), l.live.AdapterVersion()
	ds, _, err := l.Decide(ctx, probe)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0][0]
	ev, err := l.ThumbUp(ctx, r.State, "team", d.Choice)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != KindReinforce || ev.VersionAfter != 0 || l.Version() != 0 || len(l.Versions()) != 1 {
		t.Errorf("thumb up: %s, version %d → %d, versions %v", ev.Kind, ev.VersionBefore, ev.VersionAfter, l.Versions())
	}
	if !equalBits(headBits(t, l.current.head), headBefore) || l.live.AdapterVersion() != adapterBefore {
		t.Error("a thumb up changed the weights")
	}
	if got := decideBits(t, l, probe); !slices.Equal(got, answersBefore) {
		t.Errorf("answers after a thumb up %v, before %v", got, answersBefore)
	}
	if n := l.ReplayLen(); n != 1 {
		t.Errorf("replay buffer holds %d, want 1", n)
	}
	if math.Abs(ev.Confidence-d.Confidence) > 1e-4 {
		t.Errorf("event confidence %.5f, Decide's %.5f", ev.Confidence, d.Confidence)
	}
	b := l.Feedback("team")[bucketOf(ev.Confidence)]
	if b.Up != 1 || b.Down != 0 || !(ev.Adjusted >= ev.Confidence) {
		t.Errorf("bucket %+v, confidence %.4f adjusted to %.4f; want one up and no lower", b, ev.Confidence, ev.Adjusted)
	}
	// The same example again replaces itself in the buffer.
	if _, err := l.ThumbUp(ctx, r.State, "team", d.Choice); err != nil {
		t.Fatal(err)
	}
	if n := l.ReplayLen(); n != 1 {
		t.Errorf("after the same thumb up twice the replay buffer holds %d, want 1", n)
	}
	t.Logf("thumb up: %.1f ms", ev.MS)
}

// 👎 without a correction records: the answer's confidence bucket is lowered
// — every answer in it is reported less sure, and falls below a gate it met —
// and the answer is marked for escalation; no weights change.
func TestThumbDownWithoutCorrectionRecords(t *testing.T) {
	ctx := context.Background()
	r := fixture.rows[heldFrom+4]
	l := learner(t, Options{})
	ds, _, err := l.Decide(ctx, []string{r.State})
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0][0]
	// A gate just under the answer's confidence: before the thumb down the
	// answer is acted on.
	l.opts.Threshold = d.Confidence - 0.01
	if d.Escalate {
		t.Fatalf("confidence %.4f escalates at threshold %.4f", d.Confidence, l.opts.Threshold)
	}
	headBefore := headBits(t, l.current.head)
	ev, err := l.ThumbDown(ctx, r.State, "team", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("thumb down without correction: confidence %.4f reported as %.4f, %.1f ms", ev.Confidence, ev.Adjusted, ev.MS)
	if ev.Kind != KindRecord || !ev.Escalate || ev.VersionAfter != ev.VersionBefore || ev.Steps != 0 {
		t.Errorf("event %+v, want a record marked for escalation, no steps", ev)
	}
	if !equalBits(headBits(t, l.current.head), headBefore) {
		t.Error("a thumb down without a correction changed the weights")
	}
	b := l.Feedback("team")[bucketOf(ev.Confidence)]
	if b.Down != 1 || b.Up != 0 {
		t.Errorf("bucket %+v, want one down", b)
	}
	want := (DefaultPrior*ev.Confidence + 0) / (DefaultPrior + 1)
	if math.Abs(ev.Adjusted-want) > 1e-12 || !(ev.Adjusted < ev.Confidence) {
		t.Errorf("adjusted confidence %.6f, want %.6f (below %.6f)", ev.Adjusted, want, ev.Confidence)
	}
	ds, _, err = l.Decide(ctx, []string{r.State})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds[0][0]; !got.Escalate || math.Abs(got.Confidence-want) > 1e-4 {
		t.Errorf("after the thumb down Decide reports %.4f, escalate %v; want %.4f, escalated", got.Confidence, got.Escalate, want)
	}
	if n := l.ReplayLen(); n != 0 {
		t.Errorf("a thumb down without a correction put %d examples in the replay buffer", n)
	}
}

// Undo puts the previous version back bit for bit: the head, and the answers
// Decide gives.
func TestUndoRestoresExactly(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	probe := []string{fixture.rows[heldFrom].State, ws[0].state}
	head0, answers0 := headBits(t, l.current.head), decideBits(t, l, probe)
	ev, err := l.ThumbDown(ctx, ws[0].state, "team", optionName(0, ws[0].label))
	if err != nil || ev.Kind != KindRetrain {
		t.Fatalf("correction: %s, %v", ev.Kind, err)
	}
	answers1 := decideBits(t, l, probe)
	if slices.Equal(answers0, answers1) {
		t.Fatal("the correction changed no answer")
	}
	undo, err := l.Undo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("undo: %.3f ms", undo.MS)
	if undo.Kind != KindUndo || undo.VersionBefore != 1 || undo.VersionAfter != 0 || l.Version() != 0 {
		t.Errorf("undo: %s %d → %d, current %d", undo.Kind, undo.VersionBefore, undo.VersionAfter, l.Version())
	}
	if !equalBits(headBits(t, l.current.head), head0) {
		t.Error("undo: the head differs from version 0's")
	}
	if got := decideBits(t, l, probe); !slices.Equal(got, answers0) {
		t.Errorf("answers after undo %v, before the correction %v", got, answers0)
	}
	if _, err := l.Undo(); !errors.Is(err, ErrNothingToUndo) {
		t.Errorf("second undo: %v, want ErrNothingToUndo", err)
	}
	// The undone version stays reachable.
	if _, err := l.RestoreVersion(1); err != nil {
		t.Fatal(err)
	}
	if got := decideBits(t, l, probe); !slices.Equal(got, answers1) {
		t.Errorf("answers after restoring version 1 %v, when it was made %v", got, answers1)
	}
	if _, err := l.RestoreVersion(9); !errors.Is(err, ErrVersion) {
		t.Errorf("restore of an unknown version: %v, want ErrVersion", err)
	}
}

// History keeps the first version and the last History.
func TestHistoryKeepsFirstAndLast(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{History: 2})
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	kept := 0
	for _, w := range ws {
		ev, err := l.ThumbDown(ctx, w.state, "team", optionName(0, w.label))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == KindRetrain {
			kept++
		}
		if kept == 4 {
			break
		}
	}
	if kept < 4 {
		t.Fatalf("%d corrections kept, want 4", kept)
	}
	if vs := l.Versions(); !slices.Equal(vs, []uint64{0, 3, 4}) {
		t.Errorf("versions %v, want [0 3 4]", vs)
	}
	var undo []uint64
	for _, v := range l.hist.undo {
		undo = append(undo, v.id)
	}
	if !slices.Equal(undo, []uint64{0, 3}) {
		t.Errorf("undo reaches %v, want [0 3]", undo)
	}
	if _, err := l.RestoreVersion(2); !errors.Is(err, ErrVersion) {
		t.Errorf("restore of a dropped version: %v, want ErrVersion", err)
	}
}

// Save writes the current version where decide.Load reads it back, with the
// answers the Learner gives.
func TestSaveWritesTheCurrentVersion(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	if ev, err := l.ThumbDown(ctx, ws[0].state, "team", optionName(0, ws[0].label)); err != nil || ev.Kind != KindRetrain {
		t.Fatalf("correction: %s, %v", ev.Kind, err)
	}
	dir := filepath.Join(t.TempDir(), "adapted")
	if err := l.Save(dir); err != nil {
		t.Fatal(err)
	}
	m, err := decide.Load(dir, fixture.base, fixture.tok)
	if err != nil {
		t.Fatal(err)
	}
	states := []string{ws[0].state, fixture.rows[heldFrom].State}
	got, _, err := m.Decide(ctx, states)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := l.Decide(ctx, states)
	if err != nil {
		t.Fatal(err)
	}
	for i := range states {
		for q := range got[i] {
			if got[i][q].Choice != want[i][q].Choice {
				t.Errorf("state %d %s: saved model answers %s, the Learner %s", i, got[i][q].Question, got[i][q].Choice, want[i][q].Choice)
			}
			for k := range got[i][q].Scores {
				if d := math.Abs(got[i][q].Scores[k] - want[i][q].Scores[k]); d > 1e-4*max(1, math.Abs(want[i][q].Scores[k])) {
					t.Errorf("state %d %s option %d: saved %v, Learner %v", i, got[i][q].Question, k, got[i][q].Scores[k], want[i][q].Scores[k])
				}
			}
		}
	}
	if got[0][0].Choice != optionName(0, ws[0].label) {
		t.Errorf("the saved model answers %s, corrected to %s", got[0][0].Choice, optionName(0, ws[0].label))
	}
}

// Decide runs while feedback is handled, and always answers with one whole
// version: its answers are those of a version before or after, never a mix.
// (Run with -race to check the locking too.)
func TestDecideDuringFeedback(t *testing.T) {
	ctx := context.Background()
	l := learner(t, Options{})
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	probe := []string{ws[0].state}
	seen := map[string]bool{}
	answers := map[uint64][]string{0: decideBits(t, l, probe)}
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			ds, _, err := l.Decide(ctx, probe)
			if err != nil {
				errs <- err
				return
			}
			seen[fmt.Sprint(ds[0][0].Scores)] = true
		}
	}()
	for _, w := range ws[:3] {
		ev, err := l.ThumbDown(ctx, w.state, "team", optionName(0, w.label))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == KindRetrain {
			answers[ev.VersionAfter] = decideBits(t, l, probe)
		}
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	valid := map[string]bool{}
	for v := range answers {
		if _, err := l.RestoreVersion(v); err != nil {
			t.Fatal(err)
		}
		ds, _, err := l.Decide(ctx, probe)
		if err != nil {
			t.Fatal(err)
		}
		valid[fmt.Sprint(ds[0][0].Scores)] = true
	}
	for s := range seen {
		if !valid[s] {
			t.Errorf("Decide answered %s during feedback, the scores of no version", s)
		}
	}
	t.Logf("%d answers seen during %d versions", len(seen), len(answers))
}

// A cancelled correction changes nothing.
func TestCancelledCorrectionChangesNothing(t *testing.T) {
	l := learner(t, Options{})
	ws := wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0)
	head0 := headBits(t, l.current.head)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.ThumbDown(ctx, ws[0].state, "team", optionName(0, ws[0].label))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled thumb down: %v, want context.Canceled", err)
	}
	if l.Version() != 0 || !equalBits(headBits(t, l.current.head), head0) {
		t.Error("a cancelled correction changed the weights")
	}
}
