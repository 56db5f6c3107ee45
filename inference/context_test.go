package inference

import (
	"context"
	"errors"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

func TestPromptLongerThanContextIsRefusedFirst(t *testing.T) {
	cfg := tinyConfig("llama")
	cfg.MaxPositionEmbeddings = 16
	m := NewRandom(cfg, 3, cpu(t))
	if err := m.CompactWeights(mx.BFloat16); err != nil {
		t.Fatal(err)
	}
	m.SetBF16Prefill(true)
	sess := NewSession(m)
	refused, err := Generate(context.Background(), sess, tokenSeq(17, cfg.VocabSize, 1), GenerateOptions{MaxTokens: 2}, func(int) bool { return false })
	var ce *ContextError
	if !errors.As(err, &ce) || !errors.Is(err, ErrContextFull) || ce.Tokens != 17 || ce.Limit != 16 {
		t.Fatalf("err = %v, want a ContextError 17 > 16", err)
	}
	if err.Error() != "the prompt is 17 tokens and this model reads at most 16" {
		t.Errorf("message %q", err)
	}
	if sess.Cache().Len() != 0 {
		t.Errorf("the refused prompt left %d tokens in the cache", sess.Cache().Len())
	}
	if refused.BF16Prefill || strings.Contains(refused.String(), "(bf16)") {
		t.Errorf("the refused prompt's stats say it was read on bfloat16 activations: %s", refused)
	}
	// A prompt that fills the context exactly still gets its first token.
	st, err := Generate(context.Background(), sess, tokenSeq(16, cfg.VocabSize, 1), GenerateOptions{MaxTokens: 4}, func(int) bool { return false })
	if err != nil || st.GeneratedTokens != 1 || st.StopReason != StopContext {
		t.Errorf("full prompt: %+v, %v; want one token and a context stop", st, err)
	}
	if want := mx.HasBF16Rows(m.Backend()); st.BF16Prefill != want {
		t.Errorf("a prompt that was read says bf16 prefill %v, want %v (the kernel exists here)", st.BF16Prefill, want)
	}
}
