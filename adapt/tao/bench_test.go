package tao

import (
	"context"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// BenchmarkCost is the cost table for TAO: per candidate, generating
// it (48 tokens at most, prefill included, the prompt's KV cache reused
// across a prompt's candidates as Round does) and scoring it with the checks
// and with a decision-model judge (a zero-shot one: training changes its
// weights, not its cost); and one training step on 4 prompts' best
// candidates (48 answer tokens each), best-of-n alone and with the DPO term.
// On the bundled demo model and on a random-weight model with Qwen3-0.6B's
// config (f32, the demo's tokenizer and chat template; it never stops early,
// so each candidate is 48 tokens). Best of b.N for each:
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./adapt/tao -run '^$' -bench Cost -benchtime 2x -timeout 60m
func BenchmarkCost(b *testing.B) {
	cpu, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	dir := inferencetest.Demo(b)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := chat.LoadTemplate(dir)
	if err != nil {
		b.Fatal(err)
	}
	models := []struct {
		name string
		load func() *inference.Model
	}{
		{"demo", func() *inference.Model { m, _ := inferencetest.Load(b, dir); return m }},
		{"qwen3-0.6b-f32", func() *inference.Model { return inference.NewRandom(inference.Qwen3_0_6B(), 1, cpu) }},
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			m := mc.load()
			benchCost(b, m, inference.NewReplier(m, tok, tmpl), tok)
		})
		runtime.GC()
	}
}

func benchCost(b *testing.B, m *inference.Model, rep *inference.Replier, tok *tokenizer.Tokenizer) {
	ctx := context.Background()
	const maxTokens, n = 48, 4
	g := newGenerator(rep, maxTokens)
	prompts := demoPrompts()
	zs, err := decide.ZeroShot(m, tok, JudgeTask(), 256)
	if err != nil {
		b.Fatal(err)
	}
	judge, err := NewJudge(zs, "")
	if err != nil {
		b.Fatal(err)
	}
	work := m.Fork()
	a, _, err := lora.New(work, lora.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := work.PushAdapter(a); err != nil {
		b.Fatal(err)
	}
	best := func(cur *float64, v float64) { *cur = math.Min(*cur, v) }
	genMS, tokMS, checkMS, judgeMS, stepMS, dpoMS := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
	b.ResetTimer()
	for it := range b.N {
		// Generation: n candidates of one prompt, as Round makes them.
		cs, err := candidates(ctx, work, g, it, prompts[it%len(prompts)], Options{Candidates: n, Systems: []string{""}, Sampling: DefaultSampling, Seed: uint64(it)})
		if err != nil {
			b.Fatal(err)
		}
		var ms, toks float64
		items := make([]Item, len(cs))
		for i, c := range cs {
			ms += c.MS
			toks += float64(len(c.Tokens))
			items[i] = Item{Prompt: prompts[it%len(prompts)], Answer: c.Text, Finished: c.Finished}
		}
		best(&genMS, ms/n)
		best(&tokMS, ms/toks)
		t0 := time.Now()
		if _, err := (Checks{}).Score(ctx, items); err != nil {
			b.Fatal(err)
		}
		best(&checkMS, msSince(t0)/n)
		t0 = time.Now()
		if _, err := judge.Score(ctx, items); err != nil {
			b.Fatal(err)
		}
		best(&judgeMS, msSince(t0)/n)

		// Training steps on 4 pairs of 48-token answers.
		var pairs []pair
		for p := range 4 {
			ids, err := g.prompt("", prompts[p])
			if err != nil {
				b.Fatal(err)
			}
			ans := make([]int, maxTokens)
			for i := range ans {
				ans[i] = (p*131 + i*17 + 5) % 4000
			}
			pairs = append(pairs, pair{chosen: sequence{ids: slices.Concat(ids, ans), start: len(ids)},
				rejected: sequence{ids: slices.Concat(ids, ans[:maxTokens/2]), start: len(ids)}, refChosen: -200, refRejected: -100})
		}
		for _, lambda := range []float64{0, 1} {
			o := optim.NewAdam(optim.Constant(1e-4))
			st := trainer.Stepper{Bind: trainer.Adapters(work), Optimizer: o, ClipNorm: clipNorm}
			t0 := time.Now()
			sr, err := st.Step(ctx, lora.Params(work), []trainer.Batch{lossBatch(pairs, lambda, DefaultBeta, 0)})
			if err != nil {
				b.Fatal(err)
			}
			_ = sr
			if lambda == 0 {
				best(&stepMS, msSince(t0))
			} else {
				best(&dpoMS, msSince(t0))
			}
		}
	}
	b.ReportMetric(genMS, "generate-ms/candidate")
	b.ReportMetric(tokMS, "ms/token")
	b.ReportMetric(checkMS, "checks-ms/candidate")
	b.ReportMetric(judgeMS, "judge-ms/candidate")
	b.ReportMetric(stepMS, "step-ms")
	b.ReportMetric(dpoMS, "step+dpo-ms")
	b.ReportMetric(0, "ns/op")
}

func msSince(t time.Time) float64 { return ms(time.Since(t)) }
