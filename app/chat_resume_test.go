package app

import (
	"context"
	"testing"

	"github.com/inloop/inloop/inference"
)

// A stored chat continues where it stopped: its messages come back, its old
// replies take thumbs, new turns go to the same chat, and it refuses another
// model.
func TestResumeChat(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", System: "be brief", MaxTokens: 8, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Send(ctx, "What does a hacker do?", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "And why?", nil); err != nil {
		t.Fatal(err)
	}
	before := c.Messages()

	r, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8, Resume: c.ID, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Messages()
	if r.ID != c.ID || len(got) != len(before) || got[0].Role != "system" || got[1].Content != "What does a hacker do?" {
		t.Fatalf("resumed chat %d: %+v, want %+v", r.ID, got, before)
	}
	for i := range got {
		if got[i].Role != before[i].Role || got[i].Content != before[i].Content {
			t.Errorf("message %d: %+v, want %+v", i, got[i], before[i])
		}
	}
	ev, err := r.Feedback(ctx, first.MessageID, +1, "")
	if err != nil || ev.Kind != RoRReinforce {
		t.Errorf("a thumb on a reply of the stored chat: %+v, %v", ev, err)
	}
	if ev.Confidence != first.Stats.TokenProbability() {
		t.Errorf("the restored reply's confidence %v, at the time %v", ev.Confidence, first.Stats.TokenProbability())
	}
	if _, err := r.Send(ctx, "Tell me more.", nil); err != nil {
		t.Fatal(err)
	}
	msgs, _ := w.Store.Messages(ctx, c.ID)
	if len(msgs) != len(before)+2 {
		t.Errorf("the stored chat has %d messages, want %d", len(msgs), len(before)+2)
	}
	chats, _ := w.Store.Chats(ctx)
	if len(chats) != 1 {
		t.Errorf("%d chats stored, want the one resumed", len(chats))
	}
	if _, err := w.StartChat(ctx, ChatSpec{Model: tinyModelDir(t), Resume: c.ID}); err == nil {
		t.Error("a chat with demo resumed on another model")
	}
	if _, err := w.StartChat(ctx, ChatSpec{Model: "demo", Resume: 9999}); err == nil {
		t.Error("a chat that does not exist resumed")
	}
}

// A correction a chat kept comes back when the chat is continued.
func TestResumeChatKeepsItsCorrections(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(ctx, "What colour is the sea?", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := c.Feedback(ctx, turn.MessageID, -1, "The sea is blue.")
	if err != nil || ev.Kind != RoRRetrain {
		t.Fatalf("a correction with no anchors yet: %+v, %v", ev, err)
	}
	probe := func(m *inference.Model) []float32 {
		ids, _ := m.Tokens([]int{1, 2, 3, 4, 5})
		v, err := m.ForwardLast(ids, nil).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := probe(c.Model())
	r, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8, Resume: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	got := probe(r.Model())
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: %v in the continued chat, %v before", i, got[i], want[i])
		}
	}
	fresh, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for i, v := range probe(fresh.Model()) {
		same = same && v == want[i]
	}
	if same {
		t.Error("the correction changed nothing the probe can see")
	}
}
