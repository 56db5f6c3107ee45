package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// adaptScreen: what a model learns while it is used. A TAO round improves its
// adapter on the prompts of its chats with no labels, scored by a local reward
// and kept only when held-out prompts score better; the history lists every
// adaptation event the model had (test-time training, reinforce-or-retrain,
// TAO, δ-mem), with its cost, and takes a TAO round back.
type adaptScreen struct {
	u       *UI
	content fyne.CanvasObject

	model      *widget.Select
	format     *widget.Entry
	candidates *widget.Entry
	start      *widget.Button
	cancel     *widget.Button
	progress   *widget.ProgressBar
	log        *widget.Label
	result     *widget.Label

	memInfo     *widget.Label
	memTrain    *widget.Button
	memCancel   context.CancelFunc
	memProgress *widget.ProgressBar

	history *fyne.Container
	events  []app.AdaptationEvent

	job *app.Job
}

func newAdaptScreen(u *UI) *adaptScreen {
	s := &adaptScreen{u: u}
	s.model = widget.NewSelect(nil, func(string) { s.refreshHistory() })
	s.format = widget.NewEntry()
	s.format.SetPlaceHolder("optional: a pattern every good answer matches, e.g. (?m)^Answer: ")
	s.candidates = widget.NewEntry()
	s.candidates.SetText("4")
	s.start = widget.NewButtonWithIcon("Start a round", theme.MediaPlayIcon(), s.startRound)
	s.start.Importance = widget.HighImportance
	s.cancel = widget.NewButtonWithIcon("Cancel", theme.MediaStopIcon(), func() {
		if s.job != nil {
			s.job.Cancel()
		}
	})
	s.cancel.Disable()
	s.progress = widget.NewProgressBar()
	s.progress.Hide()
	s.log = widget.NewLabel("")
	s.log.Wrapping = fyne.TextWrapWord
	s.result = widget.NewLabel("")
	s.result.Wrapping = fyne.TextWrapWord
	intro := widget.NewLabel("A round writes several answers to the prompts of this model's chats, scores them with a local reward " +
		"(a judge trained on your thumbs, the thumbs history and simple checks, or the pattern below), trains the adapter on the best, " +
		"and keeps the result only if prompts it held out score better. Nothing is labelled by hand and nothing leaves this machine.")
	intro.Wrapping = fyne.TextWrapWord
	tao := widget.NewCard("Learn from your chats (TAO)", "", container.NewVBox(intro,
		widget.NewForm(widget.NewFormItem("Reward pattern", s.format), widget.NewFormItem("Answers per prompt", s.candidates)),
		container.NewHBox(s.start, s.cancel), s.progress, s.log, s.result))

	s.memInfo = widget.NewLabel("")
	s.memInfo.Wrapping = fyne.TextWrapWord
	s.memProgress = widget.NewProgressBar()
	s.memProgress.Hide()
	s.memTrain = widget.NewButtonWithIcon("Train the memory", theme.MediaPlayIcon(), s.trainMemory)
	memIntro := widget.NewLabel("δ-mem keeps what scrolls out of a chat's context in a small state per attention layer, " +
		"read and written as the chat goes, with no tokens added. Train it once per model on documents " +
		"(the sample tickets here); then turn it on in Chat's settings.")
	memIntro.Wrapping = fyne.TextWrapWord
	memory := widget.NewCard("Chat memory (δ-mem)", "", container.NewVBox(memIntro, s.memInfo, container.NewHBox(s.memTrain), s.memProgress))

	s.history = container.NewVBox()
	hist := widget.NewCard("What this model learnt while in use", "Newest first: test-time training, thumbs (reinforce-or-retrain), TAO rounds and chat memory",
		s.history)
	top := container.NewBorder(nil, nil, widget.NewLabel("Model"), nil, s.model)
	s.content = container.NewBorder(top, nil, nil, nil, container.NewVScroll(container.NewVBox(tao, memory, hist)))
	return s
}

// refresh reloads the model picker and the history (when the screen is shown).
func (s *adaptScreen) refresh() {
	names := s.u.modelNames()
	s.model.SetOptions(names)
	if s.model.Selected == "" && len(names) > 0 {
		s.model.SetSelected(names[0]) // refreshes the history
		return
	}
	s.refreshHistory()
}

// refreshHistory lists the model's adaptation events and says whether it has
// a trained memory.
func (s *adaptScreen) refreshHistory() {
	if s.model.Selected == "" {
		return
	}
	if s.memCancel == nil {
		if p, ok := s.u.ws.MemoryFile(s.u.ctx, s.model.Selected); ok {
			s.memInfo.SetText("Trained: " + p + ". Training again replaces it.")
			s.memTrain.SetText("Train it again")
		} else {
			s.memInfo.SetText("This model has no trained memory yet.")
			s.memTrain.SetText("Train the memory")
		}
	}
	info, err := s.u.ws.ResolveModel(s.u.ctx, s.model.Selected)
	if err != nil {
		return
	}
	evs, err := s.u.ws.AdaptationEvents(s.u.ctx, info.Name, 100)
	if err != nil {
		s.u.showError("Reading the history", err)
		return
	}
	s.events = evs
	s.history.RemoveAll()
	if len(evs) == 0 {
		s.history.Add(widget.NewLabel("Nothing yet. Rate replies in Chat, turn on test-time training, or run a TAO round."))
		return
	}
	for _, e := range evs {
		line := widget.NewLabel(eventText(e))
		line.Wrapping = fyne.TextWrapWord
		row := container.NewBorder(nil, nil, nil, nil, line)
		if e.Method == app.MethodTAO && e.VersionAfter != e.VersionBefore && !e.Undone {
			id := e.ID
			undo := widget.NewButtonWithIcon("Undo", theme.ContentUndoIcon(), func() { s.undoTAO(id) })
			row = container.NewBorder(nil, nil, nil, undo, line)
		}
		s.history.Add(row)
	}
}

// eventText is one history line: when, what, how long, and the versions.
func eventText(e app.AdaptationEvent) string {
	what := map[string]string{app.MethodTTT: "test-time training", app.MethodRoR: "thumbs", app.MethodTAO: "TAO round",
		app.MethodDeltaMem: "chat memory"}[e.Method]
	if what == "" {
		what = e.Method
	}
	var d struct {
		Kind   string `json:"kind"`
		Op     string `json:"op"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(e.Detail, &d)
	if d.Kind != "" {
		what += " (" + d.Kind + ")"
	} else if d.Op != "" {
		what += " (" + d.Op + ")"
	}
	text := fmt.Sprintf("%s · %s · %.0f ms", e.Created.Format("Jan 2 15:04:05"), what, e.MS)
	if e.ChatID != 0 {
		text += fmt.Sprintf(" · chat %d", e.ChatID)
	}
	if e.VersionAfter != e.VersionBefore {
		text += fmt.Sprintf(" · version %d → %d", e.VersionBefore, e.VersionAfter)
	} else {
		text += " · no weights changed"
	}
	if e.Undone {
		text += " · undone"
	}
	if d.Reason != "" {
		text += " · " + d.Reason
	}
	return text
}

func (s *adaptScreen) startRound() {
	n, err := strconv.Atoi(strings.TrimSpace(s.candidates.Text))
	if err != nil || n < 2 {
		s.u.showError("", fmt.Errorf("answers per prompt: give a number of at least 2"))
		return
	}
	spec := app.TAOSpec{Model: s.model.Selected, Format: strings.TrimSpace(s.format.Text), Candidates: n}
	job, err := s.u.ws.StartTAO(s.u.ctx, spec)
	if err != nil {
		s.u.showError("The round did not start", err)
		return
	}
	s.job = job
	s.start.Disable()
	s.cancel.Enable()
	s.progress.SetValue(0)
	s.progress.Show()
	s.result.SetText("")
	s.log.SetText(fmt.Sprintf("Run %d: reading the prompts…", job.RunID))
	s.u.follow(job, func(p app.Progress) {
		if p.Steps > 0 {
			s.progress.SetValue(float64(p.Step) / float64(p.Steps))
		}
		if p.Message != "" {
			s.log.SetText(capitalize(p.Message) + ".")
		}
	}, func(err error) { s.finished(job, err) })
}

func (s *adaptScreen) finished(job *app.Job, err error) {
	s.job = nil
	s.start.Enable()
	s.cancel.Disable()
	s.progress.Hide()
	if err != nil {
		s.result.SetText(fmt.Sprintf("Run %d stopped: %s.", job.RunID, app.UserMessage(err)))
		s.refreshHistory()
		return
	}
	var rep app.TAOReport
	_ = json.Unmarshal(job.Result(), &rep)
	text := capitalize(rep.Reason)
	if rep.Check.Prompts > 0 {
		text += fmt.Sprintf(" Held-out reward %.3f → %.3f on %d prompts (%d answers written for training, %.0f s in all).",
			rep.Check.Before, rep.Check.After, rep.Check.Prompts, rep.Candidates, rep.TotalMS/1000)
	}
	if rep.Kept && rep.AdapterPath != "" {
		text += " The new adapter is " + rep.AdapterPath + "; pick it in Chat."
	}
	s.result.SetText(text)
	s.refreshHistory()
}

func (s *adaptScreen) undoTAO(eventID int64) {
	go func() {
		a, err := s.u.ws.UndoTAO(s.u.ctx, eventID)
		s.u.do(func() {
			if err != nil {
				s.u.showError("The round was not undone", err)
				return
			}
			s.result.SetText(fmt.Sprintf("Undone: the adapter before the round is back, as %s.", a.Path))
			s.refreshHistory()
		})
	}()
}

// trainMemory trains the model's δ-mem memory in the background (a second
// press stops it) and reports recall on held-out documents.
func (s *adaptScreen) trainMemory() {
	if s.memCancel != nil {
		s.memCancel()
		return
	}
	model := s.model.Selected
	ctx, cancel := context.WithCancel(s.u.ctx)
	s.memCancel = cancel
	s.memTrain.SetText("Stop")
	s.memTrain.SetIcon(theme.MediaStopIcon())
	s.memProgress.SetValue(0)
	s.memProgress.Show()
	s.memInfo.SetText("Training on the sample tickets…")
	go func() {
		rep, err := s.u.ws.TrainMemory(ctx, app.MemoryTrainSpec{Model: model}, func(ev app.TrainEvent) {
			if ev.Kind == app.TrainEventTrain && ev.Iters > 0 {
				s.u.do(func() {
					s.memProgress.SetValue(float64(ev.Step) / float64(ev.Iters))
					s.memInfo.SetText(fmt.Sprintf("Step %d of %d · loss %.3f", ev.Step, ev.Iters, ev.Loss))
				})
			}
		})
		s.u.do(func() {
			cancel()
			s.memCancel = nil
			s.memTrain.SetIcon(theme.MediaPlayIcon())
			s.memProgress.Hide()
			if err != nil {
				s.memTrain.SetText("Train the memory")
				s.memInfo.SetText("Not trained: " + app.UserMessage(err) + ".")
				return
			}
			s.refreshHistory() // first: it resets the memory line, which the report replaces
			s.memTrain.SetText("Train it again")
			r := rep.Recall
			s.memInfo.SetText(fmt.Sprintf("Trained on %d documents and saved to %s. On documents it never saw, once the context had dropped a passage: "+
				"%.1f%% of its answer tokens recalled with the memory, %.1f%% without, %.1f%% with a memory of another passage. Turn it on in Chat's settings.",
				rep.Documents, rep.Path, 100*r.With.Accuracy, 100*r.Without.Accuracy, 100*r.Control.Accuracy))
		})
	}()
}
