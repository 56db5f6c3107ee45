package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// openUI opens a workspace in dir and the window over it, as the program does.
func openUI(t *testing.T, dir string) (*UI, *app.Workspace) {
	t.Helper()
	ws, err := app.Open(context.Background(), app.Options{DataDir: dir, Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	u := New(test.NewTempApp(t), ws)
	t.Cleanup(func() {
		u.cancel()
		ws.Close()
	})
	return u, ws
}

// eventually polls cond, holding the UI's lock, until it holds or time runs out.
func eventually(t *testing.T, u *UI, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		u.mu.Lock()
		ok := cond()
		u.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func tinyData(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data.jsonl")
	rows := strings.Repeat(`{"text": "The hacker fixed the build before breakfast."}
{"text": "A program is a list of instructions for a computer."}
`, 4)
	if err := os.WriteFile(p, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Train on the demo model from the Train screen: the chart gains points, the run
// ends done and is found in Runs; a second run cancelled shows as cancelled.
func TestTrainScreenRunsAndRunsScreenFindsIt(t *testing.T) {
	dir := t.TempDir()
	u, ws := openUI(t, dir)
	s := u.train
	locked(u, func() {
		u.show("Train")
		s.model.SetSelected("demo")
		s.data.SetText(tinyData(t))
		s.iters.SetText("6")
		s.batch.SetText("2")
		s.maxSeq.SetText("64")
		s.lr.SetText("1e-3")
	})
	if !strings.Contains(s.estimate.Text, "in memory") {
		t.Errorf("no memory estimate before the start: %q", s.estimate.Text)
	}
	locked(u, func() { test.Tap(s.start) })
	eventually(t, u, "the run to finish", func() bool { return s.job == nil && len(s.after.Objects) == 2 })
	if n := s.chart.points("train loss"); n != 6 {
		t.Errorf("the chart has %d train-loss points, want 6", n)
	}
	if !strings.HasPrefix(s.log.Text, "Done") {
		t.Errorf("after the run the screen says %q", s.log.Text)
	}

	// A long run, cancelled.
	locked(u, func() { s.iters.SetText("100000") })
	locked(u, func() { test.Tap(s.start) })
	eventually(t, u, "the second run to report", func() bool { return s.chart.points("train loss") > 0 && s.job != nil })
	locked(u, func() { test.Tap(s.cancel) })
	eventually(t, u, "the cancel", func() bool { return s.job == nil })
	runs, _ := ws.Store.Runs(context.Background(), app.RunFilter{})
	if len(runs) != 2 || runs[0].Status != "cancelled" || runs[1].Status != "done" {
		t.Fatalf("runs after a cancel: %+v", runs)
	}

	// Reopened tomorrow: the history is there.
	u.cancel()
	ws.Close()
	u2, _ := openUI(t, dir)
	locked(u2, func() { u2.show("Runs") })
	if len(u2.runs.runs) != 2 {
		t.Fatalf("the Runs screen lists %d runs, want 2", len(u2.runs.runs))
	}
	locked(u2, func() { u2.runs.list.Select(1) })
	if !strings.Contains(u2.runs.title.Text, "done") || u2.runs.chart.points("train loss") != 6 {
		t.Errorf("run details: %q with %d points", u2.runs.title.Text, u2.runs.chart.points("train loss"))
	}
}

// A chat message streams a reply with its stats and a KV meter; 👎 with a
// correction lands in the store.
func TestChatScreenStreamsAndStoresFeedback(t *testing.T) {
	u, ws := openUI(t, t.TempDir())
	c := u.chat
	locked(u, func() {
		c.maxTokens.SetText("12")
		c.newChat()
	})
	w := test.NewTempWindow(t, c.content)
	_ = w
	test.Type(c.input, "What is a hacker?")
	locked(u, func() { test.Tap(c.send) })
	eventually(t, u, "the reply", func() bool { return !c.busy && c.list.Objects[len(c.list.Objects)-1] != nil && c.kv.Value > 0 })
	reply := c.list.Objects[len(c.list.Objects)-1].(*fyne.Container)
	text := reply.Objects[1].(*widget.Label).Text
	stats := reply.Objects[2].(*fyne.Container).Objects[0].(*widget.Label).Text
	if text == "" || text == "…" || !strings.Contains(stats, "tok/s") {
		t.Fatalf("reply %q, stats %q", text, stats)
	}
	if !strings.Contains(c.kv.TextFormatter(), "of 512 tokens") {
		t.Errorf("KV meter says %q", c.kv.TextFormatter())
	}
	thumbs := reply.Objects[2].(*fyne.Container).Objects[1].(*fyne.Container).Objects[0].(*fyne.Container)
	test.Tap(thumbs.Objects[1].(*widget.Button)) // 👎
	// The correction dialog is the window's top overlay.
	var entry *widget.Entry
	var save *widget.Button
	eventually(t, u, "the correction dialog", func() bool {
		entry, save = findEntryAndButton(u.Win.Canvas().Overlays().Top(), "Send")
		return entry != nil && save != nil
	})
	test.Type(entry, "A hacker enjoys clever programming.")
	test.Tap(save)
	// The correction is stored and learnt from (or rolled back), and the
	// status line says which.
	eventually(t, u, "the correction to be learnt from", func() bool {
		return strings.Contains(c.status.Text, "Learnt the correction") || strings.Contains(c.status.Text, "would have hurt")
	})
	chats, _ := ws.Store.Chats(context.Background())
	msgs, _ := ws.Store.Messages(context.Background(), chats[0].ID)
	fb, _ := ws.Store.Feedback(context.Background(), msgs[len(msgs)-1].ID)
	if len(fb) != 1 || fb[0].Thumb != -1 || fb[0].Correction != "A hacker enjoys clever programming." {
		t.Errorf("feedback in the store: %+v", fb)
	}
	if strings.Contains(c.status.Text, "Learnt") == c.undo.Disabled() {
		t.Errorf("undo enabled %v after %q", !c.undo.Disabled(), c.status.Text)
	}
	// A 👍 on the next reply: the KV meter prices what the chat learnt as
	// prompt tokens.
	n := len(c.list.Objects)
	test.Type(c.input, "Tell me more.")
	locked(u, func() { test.Tap(c.send) })
	eventually(t, u, "the second reply", func() bool { return !c.busy && len(c.list.Objects) == n+2 && c.kv.Value > 0 })
	reply = c.list.Objects[n+1].(*fyne.Container)
	thumbs = reply.Objects[2].(*fyne.Container).Objects[1].(*fyne.Container).Objects[0].(*fyne.Container)
	locked(u, func() { test.Tap(thumbs.Objects[0].(*widget.Button)) }) // 👍
	eventually(t, u, "the meter to price what was learnt", func() bool { return c.learnt.Visible() && strings.Contains(c.learnt.Text, "on every turn") })
}

func TestEnterSendsAndShiftEnterBreaksTheLine(t *testing.T) {
	sent := 0
	e := newSubmitEntry(func() { sent++ })
	test.NewTempWindow(t, e)
	test.Type(e, "one")
	e.KeyDown(&fyne.KeyEvent{Name: "LeftShift"})
	e.TypedKey(&fyne.KeyEvent{Name: fyne.KeyReturn})
	e.KeyUp(&fyne.KeyEvent{Name: "LeftShift"})
	test.Type(e, "two")
	if sent != 0 || e.Text != "one\ntwo" {
		t.Fatalf("after Shift+Enter: sent %d, text %q", sent, e.Text)
	}
	e.TypedKey(&fyne.KeyEvent{Name: fyne.KeyReturn})
	if sent != 1 || e.Text != "one\ntwo" {
		t.Errorf("after Enter: sent %d, text %q", sent, e.Text)
	}
}

func TestModelsScreenListsTheDemoWithItsFit(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	s := u.models
	if len(s.models) == 0 || s.cell(0, 0) != "demo" || s.cell(0, 2) != "2.4M" {
		t.Fatalf("first row: %q %q", s.cell(0, 0), s.cell(0, 2))
	}
	if got := s.cell(0, 5); !strings.HasPrefix(got, "yes") && got != "unknown" {
		t.Errorf("the demo model does not fit for chat: %q", got)
	}
}

func TestDataScreenListsProblems(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	p := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(p, []byte("{\"text\": \"fine row\"}\nnot json\n{\"text\": \"another\"}\n"), 0o644)
	locked(u, func() { u.data.open(p) })
	eventually(t, u, "the summary", func() bool { return strings.Contains(u.data.summary.Text, "training examples") })
	if !strings.Contains(u.data.summary.Text, "2 training examples") || len(u.data.probs) != 1 || !strings.Contains(u.data.probs[0], "2") {
		t.Errorf("summary %q, problems %q", u.data.summary.Text, u.data.probs)
	}
}

// findEntryAndButton finds the first entry and the button labelled text in o.
func findEntryAndButton(o fyne.CanvasObject, text string) (*widget.Entry, *widget.Button) {
	var entry *widget.Entry
	var button *widget.Button
	var walk func(o fyne.CanvasObject)
	walk = func(o fyne.CanvasObject) {
		switch x := o.(type) {
		case *widget.Entry:
			if entry == nil {
				entry = x
			}
		case *widget.Button:
			if x.Text == text {
				button = x
			}
		case *fyne.Container:
			for _, c := range x.Objects {
				walk(c)
			}
		case fyne.Widget:
			r := test.WidgetRenderer(x)
			for _, c := range r.Objects() {
				walk(c)
			}
		}
	}
	if o != nil {
		walk(o)
	}
	return entry, button
}

// points counts a chart series' points (0 when it has none).
func (c *LineChart) points(series string) int {
	for _, s := range c.series {
		if s.Name == series {
			return len(s.X)
		}
	}
	return 0
}

// locked runs fn holding the UI's lock, as a background update would.
func locked(u *UI, fn func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn()
}

// While a reply is written Send is Stop, and stopping ends the turn.
func TestChatStopEndsTheReply(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	c := u.chat
	locked(u, func() {
		c.maxTokens.SetText("400")
		c.newChat()
	})
	test.Type(c.input, "Tell me a long story about hackers.")
	locked(u, func() {
		test.Tap(c.send)
		if c.send.Text != "Stop" {
			t.Errorf("while busy the button says %q", c.send.Text)
		}
		test.Tap(c.send) // stop at once
	})
	eventually(t, u, "the turn to end", func() bool { return !c.busy })
	if c.send.Text != "Send" {
		t.Errorf("after the turn the button says %q", c.send.Text)
	}
	reply := c.list.Objects[len(c.list.Objects)-1].(*fyne.Container)
	stats := reply.Objects[2].(*fyne.Container).Objects[0].(*widget.Label).Text
	if !strings.HasSuffix(stats, "· stopped") {
		t.Errorf("a stopped turn: stats %q, status %q", stats, c.status.Text)
	}
}

// An earlier chat is listed after a new one starts, and choosing it brings its
// messages back with thumbs under its reply, in the same stored chat.
func TestChatContinuesAnEarlierChat(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	c := u.chat
	locked(u, func() {
		c.maxTokens.SetText("8")
		c.newChat()
	})
	first := c.session.ID
	test.Type(c.input, "What is a hacker?")
	locked(u, func() { test.Tap(c.send) })
	eventually(t, u, "the reply", func() bool { return !c.busy && c.kv.Value > 0 })
	locked(u, func() { c.newChat() })
	if c.session.ID == first || len(c.earlier.Options) != 1 {
		t.Fatalf("after a new chat: session %d, earlier %q", c.session.ID, c.earlier.Options)
	}
	locked(u, func() { c.earlier.SetSelected(c.earlier.Options[0]) })
	if c.session.ID != first {
		t.Fatalf("continuing: session %d, want %d", c.session.ID, first)
	}
	var you, thumbs bool
	for _, o := range c.list.Objects {
		if _, b := findEntryAndButton(o, "Good"); b != nil {
			thumbs = true
		}
		if box, ok := o.(*fyne.Container); ok && len(box.Objects) == 2 {
			if v, ok := box.Objects[1].(*fyne.Container); ok && len(v.Objects) == 2 {
				if l, ok := v.Objects[1].(*widget.Label); ok && l.Text == "What is a hacker?" {
					you = true
				}
			}
		}
	}
	if !you || !thumbs {
		t.Errorf("the continued chat shows the question %v, thumbs %v", you, thumbs)
	}
}

// A decision run's result reads as nested lines, and its headline gives the
// accuracy per question.
func TestRunDetailIsReadable(t *testing.T) {
	r := app.RunRecord{Kind: "decide", Status: "done",
		Result: []byte(`{"steps": 40, "questions": {"team": {"accuracy": 0.4587, "ece_after": 0.0533}, "refund": {"accuracy": 0.792}}, "curve": [1, 2]}`)}
	d := runDetail(r)
	for _, want := range []string{"  questions:\n    refund:\n      accuracy: 0.792\n", "    team:\n      accuracy: 0.4587\n      ece_after: 0.0533\n", "  steps: 40\n", "  curve: 2 values\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("detail lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "map[") {
		t.Errorf("Go's map syntax in the detail:\n%s", d)
	}
	if h := headline(r); h != "refund 79%, team 46%" {
		t.Errorf("headline %q", h)
	}
}

// Choosing a quantized or 16-bit KV cache starts a chat that stores it so, and
// the meter says which.
func TestChatQuantizedKVChoice(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	c := u.chat
	for _, choice := range []int{2, 1} { // 8-bit, then 16-bit
		bits := kvBitsOf[kvChoices[choice]]
		locked(u, func() {
			c.maxTokens.SetText("8")
			c.kvBits.SetSelected(kvChoices[choice]) // starts a new chat
		})
		test.NewTempWindow(t, c.content)
		if c.session == nil || c.session.KV().Bits != bits {
			t.Fatalf("after choosing %q the chat stores its KV cache as %+v", kvChoices[choice], c.session.KV())
		}
		test.Type(c.input, "What is a hacker?")
		locked(u, func() { test.Tap(c.send) })
		eventually(t, u, "the reply", func() bool { return !c.busy && c.kv.Value > 0 })
		if text := c.kv.TextFormatter(); !strings.Contains(text, fmt.Sprintf("(%d-bit)", bits)) {
			t.Errorf("KV meter says %q", text)
		}
	}
}

// The Chat screen's three rounded-activation choices (8-bit decode steps, 8-bit
// prompts, bfloat16 prompts) are the workspace's, each apart from the others: ticking
// a box sets its choice alone (and keeps the chat), unticking clears it; where the
// backend has no kernel for it a box is disabled and says why.
func TestChatActivationChoices(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	c := u.chat
	test.NewTempWindow(t, c.content)
	ws := u.ws
	choices := []struct {
		name string
		box  *widget.Check
		on   func() bool
		runs bool
	}{
		{"int8 decode", c.int8, ws.Int8Decode, ws.Int8DecodeRuns()},
		{"int8 prefill", c.int8Prefill, ws.Int8Prefill, ws.Int8PrefillRuns()},
		{"bf16 prefill", c.bf16Prefill, ws.BF16Prefill, ws.BF16PrefillRuns()},
	}
	for i, k := range choices {
		others := func() (on bool) {
			for j, o := range choices {
				on = on || j != i && o.on()
			}
			return on
		}
		if !k.runs {
			if !k.box.Disabled() || !strings.Contains(k.box.Text, "lacks") {
				t.Fatalf("%s: no kernel here, yet the box is enabled or silent: %q", k.name, k.box.Text)
			}
			continue
		}
		if k.box.Checked || k.on() {
			t.Fatalf("%s: on by default", k.name)
		}
		before := c.session
		locked(u, func() { k.box.SetChecked(true) })
		if !k.on() || others() {
			t.Errorf("%s: ticking the box: this choice %v, another %v", k.name, k.on(), others())
		}
		if c.session != before {
			t.Errorf("%s: ticking the box started a new chat", k.name)
		}
		locked(u, func() { k.box.SetChecked(false) })
		if k.on() {
			t.Errorf("%s: unticking the box left the choice on", k.name)
		}
	}
	// A reply's line says which way it was decoded and its prompt read.
	if on, off := replyStats(app.ReplyStats{GeneratedTokens: 3, DecodeTPS: 50, Int8Decode: true}), replyStats(app.ReplyStats{GeneratedTokens: 3, DecodeTPS: 50}); !strings.Contains(on, "8-bit activations") || strings.Contains(off, "8-bit") || strings.Contains(off, "bfloat16") {
		t.Errorf("reply lines %q (int8) and %q (exact)", on, off)
	}
	for _, c := range []struct {
		st   app.ReplyStats
		want string
	}{
		{app.ReplyStats{Int8Prefill: true}, "prompt on 8-bit activations"},
		{app.ReplyStats{BF16Prefill: true}, "prompt on bfloat16 activations"},
		{app.ReplyStats{Int8Prefill: true, BF16Prefill: true}, "prompt on 8-bit and bfloat16 activations"},
	} {
		if line := replyStats(c.st); !strings.Contains(line, c.want) {
			t.Errorf("reply line %q does not say %q", line, c.want)
		}
	}
}

// The Train screen's estimate says when memory is short enough that blocks will be
// recomputed, and when even that may not fit.
func TestEstimateText(t *testing.T) {
	fits := app.MemoryEstimate{Weights: 1 << 30, Activations: 1 << 29, Headroom: 64 << 20, Available: 8 << 30}
	if txt := estimateText(fits); strings.Contains(txt, "recomputed") || strings.Contains(txt, "may not fit") {
		t.Errorf("a run that fits: %q", txt)
	}
	short := fits
	short.Checkpointed, short.Available = true, 2<<30
	if txt := estimateText(short); !strings.Contains(txt, "recomputed in the backward pass") || strings.Contains(txt, "may not fit") {
		t.Errorf("a run that fits checkpointed: %q", txt)
	}
	short.Available = 1 << 30
	if txt := estimateText(short); !strings.Contains(txt, "may not fit") {
		t.Errorf("a run that does not fit even checkpointed: %q", txt)
	}
}
