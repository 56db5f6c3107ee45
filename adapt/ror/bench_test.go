package ror

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
)

// BenchmarkRoR is the cost table for RoR on the bundled demo model
// with the tickets task (anchor: 60 rows, 111 decisions), for the default
// head-only Learner and for TrainAdapter:
//
//   - step-ms: one retrain step — the SGD step on a correction and 4 replay
//     examples, then the flip check (head-only: on cached features, as in
//     the steady state where replay examples got theirs when they were
//     first seen; adapter: forward and backward through the backbone, a
//     forward to check);
//   - check-ms: one rollback check, scoring the anchor set (adapter: a forward
//     over every anchor ticket);
//   - undo-ms: one undo;
//   - thumbdown-ms: a whole 👎 with a correction on a ticket never seen
//     (its forward, up to 3 steps, the check);
//   - stream20-ms: streaming 20 tokens of the same backbone after a 16-token
//     prompt, the yardstick (a step should cost no more).
//
// Each is the best of b.N runs (the machine may be shared: other work can only
// slow a run down). On two cores:
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/ror -run '^$' -bench RoR -benchtime 5x
func BenchmarkRoR(b *testing.B) {
	b.Run("head", func(b *testing.B) { benchRoR(b, learner(b, Options{MaxSteps: 1})) })
	b.Run("adapter", func(b *testing.B) {
		l, err := New(context.Background(), adapterModel(b), fixture.base, fixture.tok, fixture.rows[anchorFrom:anchorTo], Options{MaxSteps: 1, TrainAdapter: true})
		if err != nil {
			b.Fatal(err)
		}
		benchRoR(b, l)
	})
}

func benchRoR(b *testing.B, l *Learner) {
	ctx := context.Background()
	if err := l.Remember(fixture.rows[:fitRows]); err != nil {
		b.Fatal(err)
	}
	if !l.opts.TrainAdapter { // the steady state: replay examples carry their features
		if err := l.features(ctx, l.replay); err != nil {
			b.Fatal(err)
		}
	}
	var ws []*item
	for _, r := range fixture.rows[candidateFrom:candidateTo] {
		its, err := l.rowItems(r)
		if err != nil {
			b.Fatal(err)
		}
		if choice, _, err := l.answer(ctx, its[0]); err != nil {
			b.Fatal(err)
		} else if choice != its[0].label {
			ws = append(ws, its[0])
		}
	}
	if len(ws) < 2 {
		b.Fatal("too few wrong decisions")
	}
	stream := streamer(b, fixture.base)
	fresh := heldFrom
	best := map[string]float64{"step": math.Inf(1), "check": math.Inf(1), "undo": math.Inf(1), "thumbdown": math.Inf(1), "stream20": math.Inf(1)}
	run := func() {
		ev, err := l.retrain(ctx, []*item{ws[0]})
		if err != nil {
			b.Fatal(err)
		}
		best["step"], best["check"] = min(best["step"], ev.StepMS), min(best["check"], ev.CheckMS)
		if ev.Kind == KindRetrain {
			u, err := l.Undo()
			if err != nil {
				b.Fatal(err)
			}
			best["undo"] = min(best["undo"], u.MS)
		}
		r := fixture.rows[fresh]
		fresh++
		ev, err = l.ThumbDown(ctx, r.State, "team", optionName(0, (r.Labels[0]+1)%4))
		if err != nil {
			b.Fatal(err)
		}
		best["thumbdown"] = min(best["thumbdown"], ev.MS)
		if ev.Kind == KindRetrain {
			if _, err := l.Undo(); err != nil {
				b.Fatal(err)
			}
		}
		best["stream20"] = min(best["stream20"], stream())
	}
	run() // warm every path once
	b.ResetTimer()
	for range b.N {
		run()
	}
	for _, k := range []string{"step", "check", "undo", "thumbdown", "stream20"} {
		b.ReportMetric(best[k], k+"-ms")
	}
	b.ReportMetric(best["step"]/best["stream20"], "step/stream20")
	b.ReportMetric(0, "ns/op")
}

// streamer times streaming 20 tokens of m after a 16-token prompt.
func streamer(b *testing.B, m *inference.Model) func() float64 {
	ctx := context.Background()
	prompt := make([]int, 16)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % m.Config().VocabSize
	}
	sess := inference.NewSession(m)
	return func() float64 {
		t0 := time.Now()
		st, err := inference.Generate(ctx, sess, prompt, inference.GenerateOptions{MaxTokens: 20}, func(int) bool { return false })
		if err != nil || st.GeneratedTokens != 20 {
			b.Fatalf("stream: %v, %d tokens", err, st.GeneratedTokens)
		}
		return ms(time.Since(t0))
	}
}
