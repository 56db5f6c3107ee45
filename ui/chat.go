package ui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// chatScreen: pick a model (and adapter), talk to it with streamed replies, see
// what each reply cost and what the conversation holds in the KV cache, and give a
// thumb up or down on every reply.
type chatScreen struct {
	u       *UI
	content fyne.CanvasObject

	model, adapter *widget.Select
	earlier        *widget.Select   // the model's stored chats, to continue one
	earlierIDs     map[string]int64 // earlier label -> chat id
	asks           map[int64]string // chat id -> its first question ("" for none), read once
	temp           *widget.Slider
	tempLabel      *widget.Label
	maxTokens      *widget.Entry
	system         *widget.Entry
	ttt            *widget.Check
	memory         *widget.Check // δ-mem
	kvBits         *widget.RadioGroup
	int8           *widget.Check // decode on 8-bit activations (Workspace.SetInt8Decode)
	int8Prefill    *widget.Check // read prompts on 8-bit activations (Workspace.SetInt8Prefill)
	bf16Prefill    *widget.Check // read prompts of bfloat16 models on bfloat16 activations (Workspace.SetBF16Prefill)

	list   *fyne.Container // the messages
	scroll *container.Scroll
	input  *submitEntry
	send   *widget.Button
	kv     *widget.ProgressBar
	status *widget.Label
	undo   *widget.Button // takes back the last correction the chat learnt
	learnt *widget.Label  // what the chat learnt, priced as prompt tokens

	session   *app.ChatSession
	stop      context.CancelFunc // stops the reply in progress (and its test-time training)
	lastStats app.ReplyStats     // the last reply's, for the KV meter
	adapters  map[string]string  // adapter picker label -> folder
	busy      bool
}

func newChatScreen(u *UI) *chatScreen {
	c := &chatScreen{u: u, adapters: map[string]string{}}
	c.model = widget.NewSelect(nil, func(string) { c.refreshAdapters(); c.newChat() })
	c.adapter = widget.NewSelect(nil, func(string) { c.newChat() })
	c.earlier = widget.NewSelect(nil, func(label string) {
		if id := c.earlierIDs[label]; id != 0 && (c.session == nil || c.session.ID != id) {
			c.resume(id)
		}
	})
	c.earlier.PlaceHolder = "Continue an earlier chat…"
	c.temp = widget.NewSlider(0, 1.5)
	c.temp.Step = 0.05
	c.temp.SetValue(0.7)
	c.tempLabel = widget.NewLabel("0.70")
	c.temp.OnChanged = func(v float64) { c.tempLabel.SetText(fmt.Sprintf("%.2f", v)) }
	c.temp.OnChangeEnded = func(float64) { c.newChat() }
	c.maxTokens = widget.NewEntry()
	c.maxTokens.SetText("256")
	c.system = widget.NewMultiLineEntry()
	c.system.SetPlaceHolder("System prompt (optional)")
	c.system.SetMinRowsVisible(2)
	c.ttt = widget.NewCheck("Learn from each message before answering (test-time training; the lesson is discarded after the reply)", func(on bool) {
		if on && c.memory.Checked {
			c.memory.SetChecked(false) // the two do not mix; that starts the new chat
			return
		}
		c.newChat()
	})
	c.memory = widget.NewCheck("Remember what scrolls out of the context (δ-mem: an online memory, no tokens added)", func(on bool) {
		if on {
			if _, ok := c.u.ws.MemoryFile(c.u.ctx, c.model.Selected); !ok {
				c.memory.SetChecked(false) // starts a new chat, which clears the status line
				c.status.SetText("This model has no trained memory yet: train one on the Adapt screen.")
				return
			}
			if c.ttt.Checked {
				c.ttt.SetChecked(false)
				return
			}
		}
		c.newChat()
	})

	c.kvBits = widget.NewRadioGroup(kvChoices, func(string) { c.newChat() })
	c.kvBits.Horizontal = true
	c.kvBits.Required = true
	c.kvBits.Selected = kvChoices[0]

	// Takes effect at the next reply, in this chat and every other: the choice is
	// the workspace's, not the conversation's, so it starts no new chat.
	ws := c.u.ws
	c.int8 = choiceBox("Decode 4- and 8-bit models on 8-bit activations (faster; not exact: perplexity moves about 0.2%)",
		"Decode on 8-bit activations (needs integer dot products, which this machine's backend lacks)",
		ws.Int8Decode(), ws.Int8DecodeRuns(), ws.SetInt8Decode)
	c.int8Prefill = choiceBox("Read prompts of 4- and 8-bit models on 8-bit activations (faster prompts and scoring; not exact: perplexity moves under 0.2%)",
		"Read prompts on 8-bit activations (needs integer dot products for many rows, which this machine's backend lacks)",
		ws.Int8Prefill(), ws.Int8PrefillRuns(), ws.SetInt8Prefill)
	c.bf16Prefill = choiceBox("Read prompts of bfloat16 models on bfloat16 activations (faster prompts and scoring, up to 2×; not exact: perplexity moves under 0.1%)",
		"Read prompts on bfloat16 activations (needs bfloat16 dot products faster than float32 ones, which this machine's backend lacks)",
		ws.BF16Prefill(), ws.BF16PrefillRuns(), ws.SetBF16Prefill)

	c.list = container.NewVBox()
	c.scroll = container.NewVScroll(c.list)
	c.input = newSubmitEntry(c.submit)
	c.input.SetPlaceHolder("Ask something — Enter sends, Shift+Enter starts a new line")
	c.send = widget.NewButtonWithIcon("Send", theme.MailSendIcon(), func() {
		if c.busy {
			if c.stop != nil {
				c.stop()
			}
			return
		}
		c.submit()
	})
	c.send.Importance = widget.HighImportance
	c.kv = widget.NewProgressBar()
	c.kv.TextFormatter = func() string { return "KV cache: empty" }
	c.status = widget.NewLabel("")
	c.status.Wrapping = fyne.TextWrapWord
	c.learnt = widget.NewLabel("")
	c.learnt.Wrapping = fyne.TextWrapWord
	c.learnt.Hide()
	c.undo = widget.NewButtonWithIcon("Undo last correction", theme.ContentUndoIcon(), c.undoCorrection)
	c.undo.Disable()

	newBtn := widget.NewButtonWithIcon("New chat", theme.ContentAddIcon(), c.newChat)
	settings := widget.NewAccordion(widget.NewAccordionItem("Settings",
		widget.NewForm(
			widget.NewFormItem("Temperature", container.NewBorder(nil, nil, nil, c.tempLabel, c.temp)),
			widget.NewFormItem("Max tokens", c.maxTokens),
			widget.NewFormItem("System", c.system),
			widget.NewFormItem("Adapt", c.ttt),
			widget.NewFormItem("Memory", c.memory),
			widget.NewFormItem("KV cache", c.kvBits),
			widget.NewFormItem("Speed", container.NewVBox(c.int8, c.int8Prefill, c.bf16Prefill)),
			widget.NewFormItem("", widget.NewButton("Measure the KV-cache tax of this model…", func() {
				if c.model.Selected != "" {
					c.showTax(c.model.Selected)
				}
			})),
		)))
	top := container.NewVBox(
		container.NewBorder(nil, nil, nil, newBtn, container.NewGridWithColumns(3,
			container.NewBorder(nil, nil, widget.NewLabel("Model"), nil, c.model),
			container.NewBorder(nil, nil, widget.NewLabel("Adapter"), nil, c.adapter),
			c.earlier)),
		settings)
	bottom := container.NewVBox(c.status, c.learnt,
		container.NewBorder(nil, nil, widget.NewLabel("Memory this chat holds"), c.undo, c.kv),
		container.NewBorder(nil, nil, nil, c.send, c.input))
	c.content = container.NewBorder(top, bottom, nil, nil, c.scroll)
	c.refreshModels()
	return c
}

// refreshModels reloads the model picker, keeping the selection.
func (c *chatScreen) refreshModels() {
	names := c.u.modelNames()
	c.model.Options = names
	if c.model.Selected == "" && len(names) > 0 {
		c.model.SetSelected(names[0]) // starts a chat
	}
	c.model.Refresh()
}

func (c *chatScreen) refreshAdapters() {
	c.adapters = map[string]string{"None": ""}
	opts := []string{"None"}
	ads, _ := c.u.ws.Store.Adapters(c.u.ctx, c.model.Selected)
	for i := len(ads) - 1; i >= 0; i-- { // newest first
		a := ads[i]
		label := fmt.Sprintf("v%d · %s", a.Version, a.Created.Local().Format("Jan 2 15:04"))
		c.adapters[label] = a.Path
		opts = append(opts, label)
	}
	c.adapter.Options = opts
	c.adapter.Selected = "None"
	c.adapter.Refresh()
}

// useAdapter switches to model with the adapter in folder (from the Train screen).
func (c *chatScreen) useAdapter(model, folder string) {
	c.model.SetSelected(model)
	for label, p := range c.adapters {
		if p == folder {
			c.adapter.SetSelected(label)
		}
	}
}

// newChat starts a new conversation with the current settings.
// spec is the chat the settings describe.
func (c *chatScreen) spec() app.ChatSpec {
	maxTok, err := strconv.Atoi(c.maxTokens.Text)
	if err != nil || maxTok <= 0 {
		maxTok = 256
	}
	spec := app.ChatSpec{Model: c.model.Selected, Adapter: c.adapters[c.adapter.Selected], System: c.system.Text, MaxTokens: maxTok,
		Sampling: app.Sampling{Temperature: c.temp.Value, TopP: 0.95}}
	if c.ttt.Checked {
		spec.TTT = &app.TTTOptions{}
	}
	if c.memory.Checked {
		spec.Memory = &app.ChatMemory{}
	}
	spec.KV = app.KVCache{Bits: kvBitsOf[c.kvBits.Selected]}
	return spec
}

// kvChoices are the KV cache's storage a chat can take: long chats on little
// memory keep it in bfloat16 or quantized (mlx-lm's --kv-bits).
var kvChoices = []string{"Exact", "16-bit (½ of the memory)", "8-bit (about ¼)", "4-bit (about ⅙, a little less exact)"}

var kvBitsOf = map[string]int{kvChoices[1]: 16, kvChoices[2]: 8, kvChoices[3]: 4}

func (c *chatScreen) newChat() {
	if c.model.Selected == "" || c.busy {
		return
	}
	spec := c.spec()
	defer c.refreshEarlier()
	c.list.RemoveAll()
	c.kv.SetValue(0)
	c.kv.TextFormatter = func() string { return "KV cache: empty" }
	c.status.SetText("")
	s, err := c.u.ws.StartChat(c.u.ctx, spec)
	if err != nil {
		c.session = nil
		c.status.SetText("This model cannot chat: " + app.UserMessage(err))
		return
	}
	c.earlier.ClearSelected()
	c.session = s
	c.undo.Disable()
	c.learnt.Hide()
	c.list.Add(widget.NewLabelWithStyle("New chat with "+s.Info.Name+". Replies are generated on this machine; nothing leaves it.", fyne.TextAlignCenter, fyne.TextStyle{Italic: true}))
	if len(c.model.Options) == 1 && s.Info.Name == "demo" {
		get := widget.NewButtonWithIcon("Get "+RecommendedRepo+" ("+RecommendedSize+")", theme.DownloadIcon(), func() {
			c.u.show("Models")
			c.u.models.download(RecommendedRepo)
		})
		hint := widget.NewLabelWithStyle("The demo model is tiny and writes odd English; it is here so everything works offline.", fyne.TextAlignCenter, fyne.TextStyle{})
		c.list.Add(container.NewVBox(hint, container.NewCenter(get)))
	}
}

func (c *chatScreen) submit() {
	text := c.input.Text
	if text == "" || c.busy {
		return
	}
	if c.session == nil {
		c.newChat()
		if c.session == nil {
			return
		}
	}
	c.input.SetText("")
	c.list.Add(messageBubble("You", text))
	reply := widget.NewLabel("…")
	reply.Wrapping = fyne.TextWrapWord
	stats := widget.NewLabel("")
	stats.TextStyle = fyne.TextStyle{Italic: true}
	stats.Wrapping = fyne.TextWrapWord // a long line (memory, TTT, confidence) must not widen the window
	thumbs := container.NewHBox()
	c.list.Add(container.NewVBox(widget.NewLabelWithStyle(c.session.Info.Name, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), reply,
		container.NewBorder(nil, nil, nil, thumbs, stats)))
	c.scroll.ScrollToBottom()
	c.setBusy(true)
	s := c.session
	ctx, stop := context.WithCancel(c.u.ctx)
	c.stop = stop
	go func() {
		defer stop()
		first := true
		turn, err := s.Send(ctx, text, func(piece string) {
			c.u.do(func() {
				if first {
					reply.SetText("")
					first = false
				}
				reply.SetText(reply.Text + piece)
				c.scroll.ScrollToBottom()
			})
		})
		c.u.do(func() {
			c.setBusy(false)
			if err != nil && turn.MessageID == 0 {
				reply.SetText("")
				c.status.SetText(app.UserMessage(err))
				return
			}
			if first {
				reply.SetText("(no text)")
			}
			text := fmt.Sprintf("confidence %.0f%% · ", 100*turn.Confidence) + replyStats(turn.Stats)
			if turn.LowConfidence {
				text = "low confidence, check this reply · " + text
			}
			if m := turn.Memory; m != nil {
				text = fmt.Sprintf("memory wrote %d positions in %.1f ms · ", m.Writes, m.MS) + text
			}
			if r := turn.TTT; r != nil && len(r.Steps) > 0 {
				text = fmt.Sprintf("learned %d steps in %.0f ms · ", len(r.Steps), r.TotalMS) + text
			}
			stats.SetText(text)
			c.status.SetText(turn.Notice)
			if turn.Stats.StopReason == app.StopContext {
				c.status.SetText("The reply reached the end of the model's context.")
			}
			c.lastStats = turn.Stats
			c.showKV(turn.Stats)
			thumbs.Add(c.thumbButtons(s, turn.MessageID))
			c.scroll.ScrollToBottom()
		})
	}()
}

// setBusy turns Send into Stop while a reply is being written, and locks the
// pickers.
func (c *chatScreen) setBusy(b bool) {
	c.busy = b
	if b {
		c.send.SetText("Stop")
		c.send.SetIcon(theme.MediaStopIcon())
		c.model.Disable()
		c.adapter.Disable()
	} else {
		c.send.SetText("Send")
		c.send.SetIcon(theme.MailSendIcon())
		c.stop = nil
		c.model.Enable()
		c.adapter.Enable()
	}
}

// showKV fills the KV meter: this conversation's cache against a full context.
func (c *chatScreen) showKV(st app.ReplyStats) {
	use := c.session.ContextUse(st)
	tokens, limit := use.Tokens, use.Limit
	if limit > 0 {
		c.kv.Max = float64(limit)
	} else {
		c.kv.Max = float64(max(tokens, 1))
	}
	c.kv.SetValue(float64(tokens))
	size := bytesText(st.KVBytes)
	if b := c.session.KV().Bits; b > 0 {
		size += fmt.Sprintf(" (%d-bit)", b)
	}
	c.kv.TextFormatter = func() string {
		if limit > 0 {
			return fmt.Sprintf("KV cache %s · %d of %d tokens", size, tokens, limit)
		}
		return fmt.Sprintf("KV cache %s · %d tokens", size, tokens)
	}
	c.kv.Refresh()
	// What the chat learnt from thumbs, against what it would cost to show
	// the model the same examples in the prompt instead.
	if n, learntTokens, learntBytes := c.session.Learnt(); n > 0 {
		what := fmt.Sprintf("%d rated replies", n)
		if n == 1 {
			what = "1 rated reply"
		}
		c.learnt.SetText(fmt.Sprintf("Learnt from %s, in the weights. As worked examples in the prompt they would take %d more tokens and %s more KV cache, on every turn.",
			what, learntTokens, bytesText(learntBytes)))
		c.learnt.Show()
	} else {
		c.learnt.Hide()
	}
}

// thumbButtons take 👍 or 👎 (with an optional correction) on a reply: stored,
// and learnt from by reinforce-or-retrain in the chat's own adapter.
func (c *chatScreen) thumbButtons(s *app.ChatSession, messageID int64) fyne.CanvasObject {
	box := container.NewHBox()
	send := func(thumb int, correction string) {
		ctx, stop := context.WithCancel(c.u.ctx)
		box.RemoveAll()
		box.Add(widget.NewLabel("Learning…"))
		box.Add(widget.NewButtonWithIcon("Stop", theme.MediaStopIcon(), stop))
		go func() {
			defer stop()
			ev, err := s.Feedback(ctx, messageID, thumb, correction)
			c.u.do(func() {
				box.RemoveAll()
				if errors.Is(err, context.Canceled) {
					box.Add(widget.NewLabel("Stopped"))
					c.status.SetText("Stopped: the feedback is saved, and the model is as it was.")
					return
				}
				if err != nil {
					box.Add(widget.NewLabel("Feedback saved"))
					c.status.SetText(capitalize(app.UserMessage(err)) + ".")
					return
				}
				box.Add(widget.NewLabel(chatFeedbackText(ev)))
				c.status.SetText(chatFeedbackDetail(ev))
				if s == c.session {
					c.undo.Enable()
					if s.FeedbackVersion() == 0 {
						c.undo.Disable()
					}
					c.showKV(c.lastStats)
				}
			})
		}()
	}
	up := widget.NewButtonWithIcon("Good", theme.ConfirmIcon(), func() { send(1, "") })
	down := widget.NewButtonWithIcon("Wrong…", theme.CancelIcon(), func() {
		correction := widget.NewMultiLineEntry()
		correction.SetPlaceHolder("What should the answer have been? With a correction the model learns it (checked against replies you marked good, and undone if it hurts them).")
		correction.SetMinRowsVisible(4)
		correction.Wrapping = fyne.TextWrapWord
		d := dialog.NewForm("What was wrong?", "Send", "Cancel", []*widget.FormItem{widget.NewFormItem("Correction", correction)}, func(ok bool) {
			if ok {
				send(-1, correction.Text)
			}
		}, c.u.Win)
		d.Resize(fyne.NewSize(520, 260))
		d.Show()
	})
	up.Importance, down.Importance = widget.LowImportance, widget.LowImportance
	box.Add(up)
	box.Add(down)
	return box
}

// undoCorrection takes back the last correction the chat learnt.
func (c *chatScreen) undoCorrection() {
	s := c.session
	if s == nil {
		return
	}
	c.undo.Disable()
	go func() {
		ev, err := s.UndoFeedback(c.u.ctx)
		c.u.do(func() {
			if err != nil {
				c.u.showError("Nothing was undone", err)
				return
			}
			c.status.SetText(fmt.Sprintf("Back to feedback version %d: the correction is no longer in the model.", ev.VersionAfter))
			if s.FeedbackVersion() > 0 {
				c.undo.Enable()
			}
			c.showKV(c.lastStats)
		})
	}()
}

// chatFeedbackText is the short verdict under a reply after a thumb.
func chatFeedbackText(ev app.RoREvent) string {
	switch ev.Kind {
	case app.RoRReinforce:
		return "Marked good"
	case app.RoRRetrain:
		return "Correction learnt"
	case app.RoRRollback:
		return "Correction noted, not learnt"
	case app.RoRRecord:
		return "Marked wrong"
	}
	return "Feedback saved"
}

// chatFeedbackDetail says what a thumb did, in a sentence.
func chatFeedbackDetail(ev app.RoREvent) string {
	switch ev.Kind {
	case app.RoRReinforce:
		return "Kept as a confirmed example; no weights changed."
	case app.RoRRetrain:
		text := fmt.Sprintf("Learnt the correction in %d step(s), %.0f ms", ev.Steps, ev.MS)
		if ev.AnchorBefore == ev.AnchorBefore { // not NaN: there were confirmed replies to check
			text += fmt.Sprintf("; replies you marked good still score %.0f%% (was %.0f%%)", 100*ev.AnchorAfter, 100*ev.AnchorBefore)
		}
		return text + ". Undo takes it back."
	case app.RoRRollback:
		return fmt.Sprintf("Learning this would have hurt replies you marked good (%.0f%% → %.0f%%), so the model is unchanged.", 100*ev.AnchorBefore, 100*ev.AnchorAfter)
	case app.RoRRecord:
		return "Noted: replies this sure are trusted less now, and this one is flagged for checking."
	}
	return ""
}

// messageBubble shows the user's turn on a tinted background, so the two sides of
// the conversation are told apart at a glance.
func messageBubble(who, text string) fyne.CanvasObject {
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	bg := canvas.NewRectangle(theme.Color(theme.ColorNameInputBackground))
	bg.CornerRadius = theme.InputRadiusSize()
	return container.NewStack(bg, container.NewVBox(widget.NewLabelWithStyle(who, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), l))
}

// activationWords are the reply line's words for ReplyStats.RoundedPrefill's names.
var activationWords = map[string]string{"int8": "8-bit", "bf16": "bfloat16"}

func replyStats(st app.ReplyStats) string {
	decodeTag, prefillTag := "", ""
	if st.Int8Decode {
		decodeTag = " on 8-bit activations"
	}
	if r := st.RoundedPrefill(); len(r) > 0 {
		for i, name := range r {
			r[i] = activationWords[name]
		}
		prefillTag = " (prompt on " + strings.Join(r, " and ") + " activations)"
	}
	return fmt.Sprintf("%d tokens · first token %d ms%s · %.1f tok/s%s · %s", st.GeneratedTokens, st.TimeToFirstToken.Milliseconds(), prefillTag, st.DecodeTPS, decodeTag, stopText(st.StopReason))
}

func stopText(reason string) string {
	switch reason {
	case app.StopToken, app.StopString:
		return "finished"
	case app.StopMaxTokens:
		return "max tokens reached"
	case app.StopContext:
		return "context full"
	case app.StopCancelled:
		return "stopped"
	}
	return reason
}

func bytesText(n int64) string { return app.FormatBytes(n) }

// refreshEarlier lists the selected model's stored chats, newest first.
func (c *chatScreen) refreshEarlier() {
	c.earlierIDs = map[string]int64{}
	chats, _ := c.u.ws.Store.Chats(c.u.ctx)
	var opts []string
	for _, ch := range chats {
		if ch.Model != c.model.Selected || (c.session != nil && ch.ID == c.session.ID) || len(opts) >= 50 {
			continue
		}
		ask := c.firstAsk(ch.ID)
		if ask == "" { // a chat opened and never used (every settings change opens one)
			continue
		}
		label := fmt.Sprintf("“%s” · %s · #%d", ask, ch.Created.Local().Format("Jan 2 15:04"), ch.ID)
		c.earlierIDs[label] = ch.ID
		opts = append(opts, label)
	}
	c.earlier.Options = opts
	c.earlier.Refresh()
}

// firstAsk is the start of stored chat id's first message from the user
// ("" when it has none).
// A chat that is not the open one gains no messages, so its answer is kept:
// every settings change opens a chat, and the list is rebuilt each time.
func (c *chatScreen) firstAsk(id int64) string {
	if ask, ok := c.asks[id]; ok {
		return ask
	}
	msgs, err := c.u.ws.Store.Messages(c.u.ctx, id)
	if err != nil {
		return ""
	}
	ask := ""
	for _, m := range msgs {
		if m.Role == "user" && strings.TrimSpace(m.Content) != "" {
			r := []rune(strings.Join(strings.Fields(m.Content), " "))
			if len(r) > 40 {
				r = append(r[:39], '…')
			}
			ask = string(r)
			break
		}
	}
	if c.asks == nil {
		c.asks = map[int64]string{}
	}
	c.asks[id] = ask
	return ask
}

// resume continues stored chat id with the current settings: its messages
// come back, with Good / Wrong… under its replies.
func (c *chatScreen) resume(id int64) {
	if c.busy {
		return
	}
	spec := c.spec()
	spec.Resume = id
	s, err := c.u.ws.StartChat(c.u.ctx, spec)
	if err != nil {
		c.status.SetText("That chat cannot continue: " + app.UserMessage(err))
		return
	}
	msgs, err := c.u.ws.Store.Messages(c.u.ctx, id)
	if err != nil {
		c.status.SetText(app.UserMessage(err))
		return
	}
	c.session = s
	c.undo.Disable()
	c.learnt.Hide()
	c.status.SetText("")
	c.list.RemoveAll()
	c.kv.SetValue(0)
	c.kv.TextFormatter = func() string { return "KV cache: empty until the next reply reads the conversation again" }
	c.kv.Refresh()
	c.list.Add(widget.NewLabelWithStyle(fmt.Sprintf("Continuing chat #%d with %s.", id, s.Info.Name), fyne.TextAlignCenter, fyne.TextStyle{Italic: true}))
	for _, m := range msgs {
		switch m.Role {
		case "user":
			c.list.Add(messageBubble("You", m.Content))
		case "assistant":
			reply := widget.NewLabel(m.Content)
			reply.Wrapping = fyne.TextWrapWord
			stats := widget.NewLabel("")
			stats.TextStyle = fyne.TextStyle{Italic: true}
			stats.Wrapping = fyne.TextWrapWord
			if st := m.Stats; st != nil {
				stats.SetText(fmt.Sprintf("%d tokens · %.1f tok/s · %s", st.Tokens, st.TokensPerSec, stopText(st.StopReason)))
			}
			c.list.Add(container.NewVBox(widget.NewLabelWithStyle(s.Info.Name, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), reply,
				container.NewBorder(nil, nil, nil, c.thumbButtons(s, m.ID), stats)))
		}
	}
	c.scroll.ScrollToBottom()
	c.refreshEarlier()
}

// choiceBox is a check box for a workspace-wide choice: label, ticked where on,
// and set called on each change; where the choice cannot run here (runs false),
// disabled, with lacking as its text to say why.
func choiceBox(label, lacking string, on, runs bool, set func(bool)) *widget.Check {
	b := widget.NewCheck(label, set)
	b.Checked = on
	if !runs {
		b.Text = lacking
		b.Disable()
	}
	return b
}
