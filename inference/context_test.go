package inference

import (
	"context"
	"errors"
	"testing"
)

func TestPromptLongerThanContextIsRefusedFirst(t *testing.T) {
	cfg := tinyConfig("llama")
	cfg.MaxPositionEmbeddings = 16
	m := NewRandom(cfg, 3, cpu(t))
	sess := NewSession(m)
	_, err := Generate(context.Background(), sess, tokenSeq(17, cfg.VocabSize, 1), GenerateOptions{MaxTokens: 2}, func(int) bool { return false })
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
	// A prompt that fills the context exactly still gets its first token.
	st, err := Generate(context.Background(), sess, tokenSeq(16, cfg.VocabSize, 1), GenerateOptions{MaxTokens: 4}, func(int) bool { return false })
	if err != nil || st.GeneratedTokens != 1 || st.StopReason != StopContext {
		t.Errorf("full prompt: %+v, %v; want one token and a context stop", st, err)
	}
}
