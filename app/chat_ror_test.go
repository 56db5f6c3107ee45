package app

import (
	"context"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/store"
)

// Thumbs in a chat on the demo model: every reply has a confidence; a thumb up
// is stored and changes no weights; a correction retrains the chat's model (a
// stored event with its versions), the next reply is computed with the new
// version, and undo takes it back; a later chat with the same model starts its
// learner with the confirmed reply as an anchor.
func TestChatFeedbackRoR(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 12, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Send(ctx, "What does a hacker do?", nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Confidence <= 0 || first.Confidence > 1 {
		t.Errorf("confidence %v", first.Confidence)
	}
	up, err := c.Feedback(ctx, first.MessageID, +1, "")
	if err != nil || up.Kind != RoRReinforce || c.FeedbackVersion() != 0 {
		t.Fatalf("thumb up: %+v, %v", up, err)
	}
	if n, tokens, bytes := c.Learnt(); n != 1 || tokens <= first.Stats.GeneratedTokens || bytes != int64(tokens)*kvBytesPerToken(c.model.Config()) {
		t.Errorf("learnt after a thumb up: %d examples, %d tokens, %d bytes", n, tokens, bytes)
	}
	second, err := c.Send(ctx, "What colour is the sea?", nil)
	if err != nil {
		t.Fatal(err)
	}
	down, err := c.Feedback(ctx, second.MessageID, -1, "The sea is blue.")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("correction: %+v", down)
	if down.Kind != RoRRetrain && down.Kind != RoRRollback {
		t.Fatalf("thumb down with a correction: %+v", down)
	}
	if fs, _ := w.Store.Feedback(ctx, second.MessageID); len(fs) != 1 || fs[0].Correction != "The sea is blue." {
		t.Errorf("stored feedback %+v", fs)
	}
	evs, err := w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: c.ID, Method: store.MethodRoR})
	if err != nil || len(evs) != 2 || evs[0].MessageID != second.MessageID || evs[0].MS <= 0 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	for _, e := range evs { // the first thumb came before any anchor existed (NaN figures)
		if !strings.Contains(string(e.Detail), `"kind":"`) {
			t.Errorf("event %d stored without its detail: %q", e.ID, e.Detail)
		}
	}
	if down.Kind == RoRRetrain {
		if c.FeedbackVersion() != 1 || evs[0].VersionAfter != 1 {
			t.Errorf("after the retrain: version %d, event %+v", c.FeedbackVersion(), evs[0])
		}
		third, err := c.Send(ctx, "What colour is the sea?", nil)
		if err != nil {
			t.Fatal(err)
		}
		if third.Stats.AdapterVersion == second.Stats.AdapterVersion {
			t.Errorf("the next reply was computed with the old adapter version %d", third.Stats.AdapterVersion)
		}
		t.Logf("asked again after the correction: %q (before: %q)", third.Text, second.Text)
		undo, err := c.UndoFeedback(ctx)
		if err != nil || undo.VersionAfter != 0 || c.FeedbackVersion() != 0 {
			t.Fatalf("undo: %+v, %v", undo, err)
		}
		evs, _ = w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: c.ID, Method: store.MethodRoR})
		if len(evs) != 3 || !evs[1].Undone {
			t.Errorf("after undo the retrain is not marked undone: %+v", evs)
		}
		if n, _, _ := c.Learnt(); n != 1 {
			t.Errorf("after undo the chat still counts %d learnt examples", n)
		}
	}
	if _, err := c.Feedback(ctx, 999999, +1, ""); err == nil {
		t.Error("feedback on a message that does not exist was taken")
	}

	// A new chat's learner starts from the confirmed reply.
	c2, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c2.Send(ctx, "Tell me about computers.", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Feedback(ctx, r.MessageID, -1, ""); err != nil {
		t.Fatal(err)
	}
	if n := c2.learner.Anchors(); n != 1 {
		t.Errorf("the new chat's learner has %d anchors, want the one confirmed reply", n)
	}
}
