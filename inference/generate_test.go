package inference

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestGenerateGreedyMatchesArgmax(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 21, b)
	prompt := tokenSeq(7, cfg.VocabSize, 3)
	var got []int
	st, err := Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 12},
		func(tok int) bool { got = append(got, tok); return false })
	if err != nil {
		t.Fatal(err)
	}
	// The same tokens by full forwards without a cache.
	seq := slices.Clone(prompt)
	for range 12 {
		ids, _ := m.Tokens(seq)
		seq = append(seq, argmax(floats(t, m.ForwardLast(ids, nil))))
	}
	if want := seq[len(prompt):]; !slices.Equal(got, want) {
		t.Errorf("generated %v, want %v", got, want)
	}
	if st.StopReason != StopMaxTokens || st.GeneratedTokens != 12 || st.PromptTokens != 7 {
		t.Errorf("stats %+v", st)
	}
	if st.TimeToFirstToken <= 0 || st.PrefillTPS <= 0 || st.DecodeTPS <= 0 || st.PeakMemory <= 0 {
		t.Errorf("timings missing: %+v", st)
	}
	// 7 prompt tokens and 11 decoded ones are cached; the 12th was never fed back.
	if want := int64(2 * 2 * 2 * 18 * 16 * 4); st.KVBytes != want {
		t.Errorf("KV bytes %d, want %d", st.KVBytes, want)
	}
}

func TestGenerateStops(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 22, b)
	prompt := tokenSeq(5, cfg.VocabSize, 4)
	sample := SampleOptions{Temperature: 1, Seed: 5}
	var all []int
	Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 30, Sampling: sample},
		func(tok int) bool { all = append(all, tok); return false })
	if len(all) != 30 {
		t.Fatalf("generated %d tokens", len(all))
	}

	// Same seed, a stop token: generation ends before emitting it.
	stop := all[9]
	first := slices.Index(all, stop)
	var got []int
	st, err := Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 30, StopTokens: []int{stop}, Sampling: sample},
		func(tok int) bool { got = append(got, tok); return false })
	if err != nil || st.StopReason != StopToken || !slices.Equal(got, all[:first]) {
		t.Errorf("stop token %d: got %v (%s, %v), want %v", stop, got, st.StopReason, err, all[:first])
	}

	// emit asks to stop.
	n := 0
	st, _ = Generate(context.Background(), NewSession(m), prompt, GenerateOptions{Sampling: sample},
		func(int) bool { n++; return n == 4 })
	if st.StopReason != StopEmit || st.GeneratedTokens != 4 {
		t.Errorf("emit stop: %+v", st)
	}

	// The context limit.
	small := cfg
	small.MaxPositionEmbeddings = 9
	ms := NewRandom(small, 22, b)
	st, _ = Generate(context.Background(), NewSession(ms), prompt, GenerateOptions{Sampling: sample}, func(int) bool { return false })
	if st.StopReason != StopContext || st.GeneratedTokens != 5 {
		t.Errorf("context stop: %+v", st)
	}

	// Cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	st, err = Generate(ctx, NewSession(m), prompt, GenerateOptions{Sampling: sample},
		func(int) bool { cancel(); return false })
	if !errors.Is(err, context.Canceled) || st.StopReason != StopCancelled || st.GeneratedTokens != 1 {
		t.Errorf("cancel: %+v, %v", st, err)
	}
}

// A second turn reuses the first turn's cache and gives what a fresh session gives.
func TestGenerateSecondTurnReuses(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen2")
	m := NewRandom(cfg, 23, b)
	s := NewSession(m)
	turn1 := tokenSeq(10, cfg.VocabSize, 6)
	var reply []int
	Generate(context.Background(), s, turn1, GenerateOptions{MaxTokens: 5}, func(tok int) bool { reply = append(reply, tok); return false })
	turn2 := append(append(slices.Clone(turn1), reply...), 7, 8, 9)
	var a, c []int
	st, err := Generate(context.Background(), s, turn2, GenerateOptions{MaxTokens: 6}, func(tok int) bool { a = append(a, tok); return false })
	if err != nil {
		t.Fatal(err)
	}
	if st.ReusedTokens != 14 { // the prompt and 4 of 5 reply tokens were fed through the model
		t.Errorf("reused %d tokens, want 14", st.ReusedTokens)
	}
	Generate(context.Background(), NewSession(m), turn2, GenerateOptions{MaxTokens: 6}, func(tok int) bool { c = append(c, tok); return false })
	if !slices.Equal(a, c) {
		t.Errorf("second turn %v, fresh session %v", a, c)
	}
}

func TestPerplexity(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 24, b)
	ids := tokenSeq(40, cfg.VocabSize, 8)
	got, err := Perplexity(m, ids, 16)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: windows [0,17), [16,33), [32,40), each predicting from its own start.
	nll, n := 0.0, 0
	for start := 0; start+1 < len(ids); start += 16 {
		end := min(start+17, len(ids))
		tok, _ := m.Tokens(ids[start : end-1])
		logits := floats(t, m.Forward(tok, nil))
		V := cfg.VocabSize
		for i := 0; i < end-1-start; i++ {
			row := logits[i*V : (i+1)*V]
			mx := float64(row[argmax(row)])
			sum := 0.0
			for _, v := range row {
				sum += math.Exp(float64(v) - mx)
			}
			nll += mx + math.Log(sum) - float64(row[ids[start+i+1]])
			n++
		}
	}
	if want := math.Exp(nll / float64(n)); math.Abs(got-want) > 1e-4*want {
		t.Errorf("perplexity %g, want %g", got, want)
	}
	if _, err := Perplexity(m, ids[:1], 16); err == nil {
		t.Error("one token: no error")
	}
}

// Stats.LogProb is the sum of the emitted tokens' log-probabilities: with
// greedy decoding it equals what full forward passes give.
func TestGenerateLogProb(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 21, b)
	prompt := tokenSeq(7, cfg.VocabSize, 3)
	var got []int
	st, err := Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 6, LogProb: true},
		func(tok int) bool { got = append(got, tok); return false })
	if err != nil {
		t.Fatal(err)
	}
	seq := slices.Clone(prompt)
	var want float64
	for _, tok := range got {
		ids, _ := m.Tokens(seq)
		want += logProb(floats(t, m.ForwardLast(ids, nil)), tok)
		seq = append(seq, tok)
	}
	if math.Abs(st.LogProb-want) > 1e-4*float64(len(got)) || st.LogProb >= 0 {
		t.Errorf("LogProb %v, full forwards give %v", st.LogProb, want)
	}
	if p := st.TokenProbability(); p <= 0 || p > 1 || math.Abs(p-math.Exp(want/6)) > 1e-4 {
		t.Errorf("TokenProbability %v", p)
	}
	st, _ = Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 2}, func(int) bool { return false })
	if st.LogProb != 0 {
		t.Errorf("LogProb without asking: %v", st.LogProb)
	}
}

func TestGenerateRefusesNegativeMaxTokens(t *testing.T) {
	m := NewRandom(tinyConfig("llama"), 21, cpu(t))
	s := NewSession(m)
	_, err := Generate(context.Background(), s, []int{1, 2}, GenerateOptions{MaxTokens: -5}, func(int) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "max tokens -5") {
		t.Errorf("max tokens -5: %v", err)
	}
	if len(s.Tokens()) != 0 {
		t.Errorf("a refused generation left %d tokens in the session", len(s.Tokens()))
	}
}
