package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
)

func TestChatSessionStoresTurnsAndReusesCache(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: tinyModelDir(t), System: "be brief", MaxTokens: 6, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	first, err := c.Send(ctx, "hello there", func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if streamed.String() != first.Text || first.Stats.GeneratedTokens == 0 {
		t.Errorf("streamed %q, reply %q, %d tokens", streamed.String(), first.Text, first.Stats.GeneratedTokens)
	}
	second, err := c.Send(ctx, "and again", nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Stats.ReusedTokens == 0 {
		t.Errorf("the second turn reused no cached tokens: %+v", second.Stats)
	}
	msgs, err := w.Store.Messages(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,user,assistant" {
		t.Fatalf("stored roles %s", got)
	}
	if msgs[2].Stats == nil || msgs[2].Stats.Tokens != first.Stats.GeneratedTokens || msgs[2].Content != first.Text || msgs[2].ID != first.MessageID {
		t.Errorf("stored reply %+v, want %q with %d tokens", msgs[2], first.Text, first.Stats.GeneratedTokens)
	}
	// A second chat on the same model shares its base weights but not its adapters.
	c2, err := w.StartChat(ctx, ChatSpec{Model: c.Info.Path, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Model() == c.Model() {
		t.Error("two chats share one adapter stack")
	}
}

func TestChatCommandReadsStdin(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	in := strings.NewReader("hello\n/reset\nhi\n/exit\n")
	code := Run(context.Background(), []string{"chat", "--data-dir", dir, "--backend", "cpu", "--model", tinyModelDir(t), "--max-tokens", "4", "--temp", "0"}, in, &out, &errb)
	if code != 0 {
		t.Fatalf("chat exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "(conversation cleared)") || strings.Count(errb.String(), "generated") != 2 {
		t.Errorf("chat output:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	w := openTestWorkspace(t, dir)
	defer w.Close()
	chats, err := w.Store.Chats(context.Background())
	if err != nil || len(chats) != 1 {
		t.Fatalf("chats %v, %v", chats, err)
	}
	msgs, _ := w.Store.Messages(context.Background(), chats[0].ID)
	if len(msgs) != 4 {
		t.Errorf("stored %d messages, want 4", len(msgs))
	}
}

func TestFeedbackIsStored(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: tinyModelDir(t), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(ctx, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddFeedback(ctx, turn.MessageID, -1, "say hello back"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddFeedback(ctx, turn.MessageID, 0, ""); err == nil {
		t.Error("a thumb of 0 was accepted")
	}
	fb, err := w.Store.Feedback(ctx, turn.MessageID)
	if err != nil || len(fb) != 1 || fb[0].Thumb != -1 || fb[0].Correction != "say hello back" {
		t.Errorf("feedback %+v, %v", fb, err)
	}
}
