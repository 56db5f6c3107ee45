package ror

import (
	"context"
	"math"
	"runtime"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
)

// BenchmarkChatRoR is the cost table for RoR on chat replies: a conversation
// of 64 tokens, a reply of 32, four confirmed replies as the anchor set, on
// the bundled demo model and on random-weight models with Qwen3-0.6B's config
// (f32 and 4-bit):
//
//   - read-ms: reading the new correction and the reply it replaces through
//     the blocks below the adapter, once (replay items keep theirs);
//   - step-ms: one LoRA step on a correction mixed with two replay replies
//     (forward and backward through the adapted blocks, Adam);
//   - flip-ms: the checks around it, the correction's loss before and
//     whether the model now prefers it to its own reply (three forwards);
//   - check-ms: scoring the anchor set (a forward per anchor);
//   - undo-ms: installing the previous version;
//   - stream20-ms: streaming 20 tokens of the same model after a 16-token
//     prompt, the yardstick (a step should cost no more).
//
// Best of b.N runs each. Qwen3-0.6B takes minutes on two cores:
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/ror -run '^$' -bench ChatRoR -benchtime 3x -timeout 60m
func BenchmarkChatRoR(b *testing.B) {
	cpu, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	models := []struct {
		name string
		load func() *inference.Model
	}{
		{"demo", func() *inference.Model { m, _ := inferencetest.Load(b, inferencetest.Demo(b)); return m }},
		{"qwen3-0.6b/f32", func() *inference.Model { return inference.NewRandom(inference.Qwen3_0_6B(), 1, cpu) }},
		{"qwen3-0.6b/bf16", func() *inference.Model { // a bf16 checkpoint as it loads: compact
			m := inference.NewRandom(inference.Qwen3_0_6B(), 1, cpu)
			if err := m.CompactWeights(mx.BFloat16); err != nil {
				b.Fatal(err)
			}
			return m
		}},
		{"qwen3-0.6b/q4", func() *inference.Model {
			c := inference.Qwen3_0_6B()
			c.Quantization = &inference.Quantization{QuantParams: inference.QuantParams{GroupSize: 64, Bits: 4}}
			return inference.NewRandom(c, 1, cpu)
		}},
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			benchChatRoR(b, mc.load())
			runtime.GC()
		})
	}
}

func benchChatRoR(b *testing.B, m *inference.Model) {
	ctx := context.Background()
	vocab := m.Config().VocabSize
	seq := func(seed, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = (i*7919 + seed*104729 + 13) % vocab
		}
		return out
	}
	ex := func(seed int) ChatExample { return ChatExample{Prompt: seq(seed, 64), Reply: seq(seed+1000, 32)} }
	stream := streamer(b, m)
	l, err := NewChat(m, nil, ChatOptions{MaxSteps: 1, AnchorMargin: 1})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.AddAnchor(ctx, ex(1), ex(2), ex(3), ex(4)); err != nil {
		b.Fatal(err)
	}
	// Two confirmed replies in the replay buffer, so every timed step mixes
	// the correction with two of them, as a chat's steps do once it has any.
	// (Without them the first step trains on the correction alone, a third of
	// the work, and a best-of took that step.)
	for _, e := range []ChatExample{ex(5), ex(6)} {
		l.remember(l.item(e))
	}
	var best map[string]float64
	k := 10
	run := func() {
		wrong := ex(k)
		k++
		ev, err := l.ThumbDown(ctx, wrong, 0.3, seq(k+5000, 32))
		if err != nil {
			b.Fatal(err)
		}
		best["read"], best["step"], best["flip"], best["check"] = min(best["read"], ev.ReadMS), min(best["step"], ev.StepMS), min(best["flip"], ev.FlipMS), min(best["check"], ev.CheckMS)
		if ev.Kind == KindRetrain {
			u, err := l.Undo()
			if err != nil {
				b.Fatal(err)
			}
			best["undo"] = min(best["undo"], u.MS)
		}
		best["stream20"] = min(best["stream20"], stream())
	}
	best = map[string]float64{}
	run() // warm every path once, not counted
	best = map[string]float64{"read": math.Inf(1), "step": math.Inf(1), "flip": math.Inf(1), "check": math.Inf(1), "undo": math.Inf(1), "stream20": math.Inf(1)}
	b.ResetTimer()
	for range b.N {
		if l.ReplayLen() < 2 {
			b.Fatalf("replay buffer holds %d examples, want 2 or more", l.ReplayLen())
		}
		run()
	}
	for _, k := range []string{"read", "step", "flip", "check", "undo", "stream20"} {
		b.ReportMetric(best[k], k+"-ms")
	}
	b.ReportMetric(best["step"]/best["stream20"], "step/stream20")
	b.ReportMetric(0, "ns/op")
}
