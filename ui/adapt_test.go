package ui

import (
	"context"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// The Adapt screen: a TAO round started from it runs as a job and says why it
// kept or left the adapter; the history lists the model's adaptation events,
// the thumbs from a chat among them.
func TestAdaptScreenRunsARoundAndListsTheHistory(t *testing.T) {
	ctx := context.Background()
	u, ws := openUI(t, t.TempDir())
	for _, q := range []string{"What does a hacker do?", "Tell me about computers.", "Why do programs have bugs?", "What is a program?",
		"Who fixes the build?", "What is a network?", "Where do bugs come from?", "What is a compiler?"} {
		c, err := ws.StartChat(ctx, app.ChatSpec{Model: "demo", MaxTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		turn, err := c.Send(ctx, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q == "What is a program?" {
			if _, err := c.Feedback(ctx, turn.MessageID, +1, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := u.adapt
	locked(u, func() {
		u.show("Adapt")
		if s.model.Selected != "demo" {
			t.Errorf("model %q", s.model.Selected)
		}
		if len(s.history.Objects) != 1 || !strings.Contains(s.history.Objects[0].(*fyne.Container).Objects[0].(*widget.Label).Text, "thumbs (reinforce)") {
			t.Errorf("history before the round: %d lines: %s", len(s.history.Objects), eventText(s.events[0]))
		}
		s.format.SetText("^") // every answer matches: a reward that tells nothing apart
		s.candidates.SetText("2")
		test.Tap(s.start)
	})
	eventually(t, u, "the round to end", func() bool { return s.job == nil && s.result.Text != "" })
	if !strings.Contains(s.result.Text, "does not tell the candidates apart") {
		t.Errorf("result %q", s.result.Text)
	}
	if len(s.events) != 2 || s.events[0].Method != app.MethodTAO {
		t.Errorf("history after the round: %+v", s.events)
	}
}

// Memory in Chat: with no trained memory the switch says where to train one
// and stays off; the Adapt screen says the same. TTT and memory exclude each
// other.
func TestMemorySwitchNeedsATrainedMemory(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	c := u.chat
	locked(u, func() {
		c.newChat()
		c.memory.SetChecked(true)
	})
	if c.memory.Checked || !strings.Contains(c.status.Text, "Adapt screen") {
		t.Errorf("memory switch on a model without one: checked %v, status %q", c.memory.Checked, c.status.Text)
	}
	locked(u, func() { u.show("Adapt") })
	if !strings.Contains(u.adapt.memInfo.Text, "no trained memory yet") || u.adapt.memTrain.Text != "Train the memory" {
		t.Errorf("Adapt says %q, button %q", u.adapt.memInfo.Text, u.adapt.memTrain.Text)
	}
	locked(u, func() { c.ttt.SetChecked(true) })
	if !c.ttt.Checked || c.session == nil {
		t.Errorf("TTT on: checked %v, session %v", c.ttt.Checked, c.session != nil)
	}
}
