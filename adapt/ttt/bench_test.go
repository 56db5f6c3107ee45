package ttt

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// BenchmarkStep is the cost table: one TTT step (forward, backward to
// the temporary adapter, Adam update) on a piece of 64, 128 or 256 tokens,
// against streaming 20 tokens of the same model after a 16-token prompt, on
// the bundled demo model and on a random-weight model with Qwen3-0.6B's config,
// dense f32, bfloat16 (compact, as its checkpoint loads) and 4-bit. The two are timed alternately in each iteration and the
// best of b.N runs is kept for each (the machine may be shared: other work can
// only slow a run down), so step/stream20 is the ratio the target (≤ 1) is
// about. Qwen3-0.6B takes minutes on two cores:
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/ttt -run '^$' -bench Step -benchtime 3x -timeout 60m
func BenchmarkStep(b *testing.B) {
	cpu, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	models := []struct {
		name string
		load func() *inference.Model
	}{
		{"demo", func() *inference.Model { m, _ := demoModel(b); return m }},
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
		var m *inference.Model
		for _, n := range []int{16, 64, 128, 256} {
			b.Run(fmt.Sprintf("%s/tokens=%d", mc.name, n), func(b *testing.B) {
				if m == nil {
					m = mc.load()
				}
				benchStep(b, m, n)
			})
		}
		m = nil
		runtime.GC()
	}
}

func benchStep(b *testing.B, m *inference.Model, n int) {
	ctx := context.Background()
	vocab := m.Config().VocabSize
	piece := make([]int, max(n+1, 16))
	for i := range piece {
		piece[i] = (i*7919 + 13) % vocab
	}
	prompt := piece[:16]
	sess := inference.NewSession(m)
	if _, _, err := sess.Prefill(prompt); err != nil {
		b.Fatal(err)
	}
	stream := func() time.Duration {
		t0 := time.Now()
		st, err := inference.Generate(ctx, sess, prompt, inference.GenerateOptions{MaxTokens: 20}, func(int) bool { return false })
		if err != nil || st.GeneratedTokens != 20 {
			b.Fatalf("stream: %v, %d tokens", err, st.GeneratedTokens)
		}
		return time.Since(t0)
	}
	step := func() float64 {
		a, res, err := Adapt(ctx, m, [][]int{piece[:n+1]}, Options{Steps: 1, MaxTokens: n}, nil)
		if err != nil {
			b.Fatal(err)
		}
		a.Done()
		return res.Steps[0].MS
	}
	stream() // warm both paths once
	step()
	bestStep, bestStream := math.Inf(1), math.Inf(1)
	b.ResetTimer()
	for range b.N {
		bestStep = min(bestStep, step())
		bestStream = min(bestStream, ms(stream()))
	}
	b.ReportMetric(bestStep, "step-ms")
	b.ReportMetric(bestStream, "stream20-ms")
	b.ReportMetric(bestStep/bestStream, "step/stream20")
	b.ReportMetric(0, "ns/op")
}
