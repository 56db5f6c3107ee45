package deltamem

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
)

// BenchmarkDecode is the speed claim and the chat-time cost table:
// decoding 64 tokens after a 16-token prompt with the memory off (no hook) and
// on (a memory with non-zero corrections, so nothing is skipped), timed
// alternately in each iteration, best of b.N kept for each (the machine may be
// shared: other work only slows a run down). on/off is the ratio of decode
// speeds (≥ 0.90 is the target: tok/s within 10%), mem-ms/token the memory's own
// time per position read, all layers together (State.Spent). Qwen3-0.6B-shaped random
// weights take a minute on two cores:
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/deltamem -run '^$' -bench Decode -benchtime 3x -timeout 60m
func BenchmarkDecode(b *testing.B) {
	for _, mc := range benchModels(b) {
		b.Run(mc.name, func(b *testing.B) {
			m := mc.load()
			defer runtime.GC()
			mem, err := New(m, Config{}, 1)
			if err != nil {
				b.Fatal(err)
			}
			mem = randomize(b, mem, 0.01, 2)
			vocab := m.Config().VocabSize
			prompt := seq(16, vocab, 1)
			run := func(on bool) (float64, time.Duration) {
				s := inference.NewSession(m)
				st := mem.NewState()
				if on {
					if err := mem.Attach(m, s.Cache(), st); err != nil {
						b.Fatal(err)
					}
				}
				stats, err := inference.Generate(context.Background(), s, prompt, inference.GenerateOptions{MaxTokens: 64}, func(int) bool { return false })
				if err != nil || stats.GeneratedTokens != 64 {
					b.Fatalf("generate: %v, %d tokens", err, stats.GeneratedTokens)
				}
				if st.Writes == 0 {
					return stats.DecodeTPS, 0
				}
				return stats.DecodeTPS, st.Spent() / time.Duration(st.Writes)
			}
			run(false)
			run(true)
			var bestOff, bestOn float64
			bestSpent := time.Duration(math.MaxInt64)
			b.ResetTimer()
			for range b.N {
				off, _ := run(false)
				on, spent := run(true)
				if spent == 0 {
					b.Fatal("the memory recorded no time")
				}
				bestOff, bestOn, bestSpent = max(bestOff, off), max(bestOn, on), min(bestSpent, spent)
			}
			b.ReportMetric(bestOff, "off-tok/s")
			b.ReportMetric(bestOn, "on-tok/s")
			b.ReportMetric(bestOn/bestOff, "on/off")
			b.ReportMetric(ms(bestSpent), "mem-ms/token")
			b.ReportMetric(float64(mem.NumParams()), "params")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkTrainStep is the offline cost: one optimizer step of the recall
// task (DefaultTask; batch 8 on the demo model, 1 on the Qwen3-0.6B shape).
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/deltamem -run '^$' -bench TrainStep -benchtime 3x -timeout 60m
func BenchmarkTrainStep(b *testing.B) {
	for _, mc := range benchModels(b) {
		b.Run(mc.name, func(b *testing.B) {
			m := mc.load()
			defer runtime.GC()
			batch := 8
			if m.Config().NumHiddenLayers > 8 {
				batch = 1
			}
			vocab := m.Config().VocabSize
			var docs [][]int
			for i := range 8 {
				docs = append(docs, seq(200, vocab, uint64(i)))
			}
			best := math.Inf(1)
			b.ResetTimer()
			for range b.N {
				_, res, err := Train(context.Background(), m, nil, docs, TrainOptions{Steps: 2, Batch: batch}, nil)
				if err != nil {
					b.Fatal(err)
				}
				best = min(best, res.Steps[1].MS)
			}
			b.ReportMetric(best, "step-ms")
			b.ReportMetric(float64(batch), "batch")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type benchModel struct {
	name string
	load func() *inference.Model
}

func benchModels(b *testing.B) []benchModel {
	return []benchModel{
		{"demo", func() *inference.Model { m, _ := inferencetest.Load(b, inferencetest.Demo(b)); return m }},
		{"qwen3-0.6b/f32", func() *inference.Model {
			bk, err := mx.Open("cpu")
			if err != nil {
				b.Fatal(err)
			}
			return inference.NewRandom(inference.Qwen3_0_6B(), 1, bk)
		}},
	}
}

// BenchmarkHook is one decode step of one layer's memory alone (attention
// replaced by the identity), at the demo's and Qwen3-0.6B's widths: what
// mem-ms/token in BenchmarkDecode is made of.
func BenchmarkHook(b *testing.B) {
	bk, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  func() inference.Config
	}{
		{"demo-width", func() inference.Config {
			c := inference.Qwen3_0_6B()
			c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize = 192, 4, 2, 48, 512
			return c
		}},
		{"qwen3-0.6b-width", inference.Qwen3_0_6B},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := c.cfg()
			cfg.NumHiddenLayers, cfg.VocabSize = 1, 256
			m := inference.NewRandom(cfg, 1, bk)
			mem, _ := New(m, Config{}, 1)
			mem = randomize(b, mem, 0.01, 1)
			st := mem.NewState()
			l := mem.layers[0]
			h := &liveHook{mem: mem, st: st, proj: mem.params[paramName(l, "proj")], bias: mem.params[paramName(l, "proj_bias")],
				uq: mem.params[paramName(l, "query_out")], uo: mem.params[paramName(l, "attn_out")]}
			x := mx.Full(bk, []int{1, 1, cfg.HiddenSize}, 0.5, mx.Float32)
			q := mx.Full(bk, []int{1, cfg.NumAttentionHeads, 1, cfg.Head()}, 0.5, mx.Float32)
			id := func(q *mx.Array) *mx.Array { return q }
			b.ResetTimer()
			for range b.N {
				if err := mx.Eval(h.Attend(x, q, id)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
