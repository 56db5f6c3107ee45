package decide

import (
	"context"
	"runtime"
	"testing"

	"github.com/inloop/inloop/inference"
)

// Benchmarks of deciding, on the bundled demo model and on random-weight
// models with Qwen3-0.6B's shape (float32 and 4-bit), all with the sample
// tickets task and the demo tokenizer (its ids are valid in any larger
// vocabulary). One decision is one question of one ticket: all its options in
// one forward pass. Batched is every question of 16 tickets per call.
//
//	go test ./training/decide -run '^$' -bench Decide -benchtime 5x
func BenchmarkDecide(b *testing.B) {
	demo, tok := demoModel(b)
	task, rows, _ := ticketsTask(b)
	states := make([]string, 16)
	for i := range states {
		states[i] = rows[i*7].State
	}
	cpu := demo.Backend()
	models := []struct {
		name string
		make func() *inference.Model
	}{
		{"demo", func() *inference.Model { return demo }},
		{"qwen3-0.6b-f32", func() *inference.Model { return inference.NewRandom(inference.Qwen3_0_6B(), 1, cpu) }},
		{"qwen3-0.6b-q4", func() *inference.Model {
			c := inference.Qwen3_0_6B()
			c.Quantization = &inference.Quantization{QuantParams: inference.QuantParams{GroupSize: 64, Bits: 4}}
			return inference.NewRandom(c, 1, cpu)
		}},
	}
	for _, mc := range models {
		var m *Model
		setup := func(b *testing.B) *Model {
			if m == nil {
				runtime.GC()
				var err error
				if m, err = ZeroShot(mc.make(), tok, task, 512); err != nil {
					b.Fatal(err)
				}
			}
			return m
		}
		b.Run(mc.name+"/one", func(b *testing.B) {
			m := setup(b)
			items, _, err := m.items(states[:1], []int{0}) // the team question: 4 options
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := scoreItems(context.Background(), m.model, m.head, m.Task, items, DefaultBatchTokens, m.enc.Marker()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/decision")
			b.ReportMetric(float64(len(items[0].seq.Tokens)), "tokens")
		})
		b.Run(mc.name+"/batched", func(b *testing.B) {
			m := setup(b)
			b.ResetTimer()
			for range b.N {
				if _, _, err := m.Decide(context.Background(), states); err != nil {
					b.Fatal(err)
				}
			}
			n := len(states) * len(task.Questions)
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		m = nil
		runtime.GC()
	}
}
