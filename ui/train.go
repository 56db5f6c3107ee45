package ui

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// trainScreen: a LoRA/QLoRA form with sane defaults and the memory estimate before
// starting, then the run live: loss and validation curves, speed, time left,
// memory; cancel, resume, and what to do with the adapter when it is done.
type trainScreen struct {
	u       *UI
	content fyne.CanvasObject

	model                                  *widget.Select
	data                                   *widget.Entry
	iters, batch, lr, rank, layers, maxSeq *widget.Entry
	estimate                               *widget.Label

	start, cancel, resume *widget.Button
	chart                 *LineChart
	progress              *widget.ProgressBar
	stats                 *widget.Label
	log                   *widget.Label
	after                 *fyne.Container

	job *app.Job
}

func newTrainScreen(u *UI) *trainScreen {
	s := &trainScreen{u: u}
	s.model = widget.NewSelect(nil, func(string) { s.updateEstimate() })
	s.data = widget.NewEntry()
	s.data.SetPlaceHolder("a JSONL file, a data folder, or a folder of documents")
	browse := widget.NewButtonWithIcon("", theme.FolderOpenIcon(), func() {
		dialog.ShowFolderOpen(func(d fyne.ListableURI, err error) {
			if err == nil && d != nil {
				s.data.SetText(d.Path())
			}
		}, u.Win)
	})
	field := func(v string) *widget.Entry {
		e := widget.NewEntry()
		e.SetText(v)
		e.OnChanged = func(string) { s.updateEstimate() }
		return e
	}
	s.iters, s.batch, s.lr = field("200"), field("4"), field("1e-4")
	s.rank, s.layers, s.maxSeq = field("8"), field("-1"), field("512")
	s.estimate = widget.NewLabel("")
	s.estimate.Wrapping = fyne.TextWrapWord
	form := widget.NewForm(
		widget.NewFormItem("Model", s.model),
		widget.NewFormItem("Data", container.NewBorder(nil, nil, nil, browse, s.data)),
		widget.NewFormItem("Steps", s.iters),
		widget.NewFormItem("Batch size", s.batch),
		widget.NewFormItem("Learning rate", s.lr),
		widget.NewFormItem("LoRA rank", s.rank),
		widget.NewFormItem("Layers (-1 all)", s.layers),
		widget.NewFormItem("Max tokens per row", s.maxSeq),
	)
	s.start = widget.NewButtonWithIcon("Start training", theme.MediaPlayIcon(), s.startRun)
	s.start.Importance = widget.HighImportance
	s.cancel = widget.NewButtonWithIcon("Cancel", theme.MediaStopIcon(), func() {
		if s.job != nil {
			s.job.Cancel()
		}
	})
	s.cancel.Disable()
	s.resume = widget.NewButtonWithIcon("Resume a cut-off run…", theme.MediaReplayIcon(), s.askResume)

	s.chart = NewLineChart("step", "loss")
	s.chart.SetEmptyText("The loss curve appears after the first report")
	s.progress = widget.NewProgressBar()
	s.progress.Hide() // until a run starts
	s.stats = widget.NewLabel("")
	s.log = widget.NewLabel("")
	s.log.Wrapping = fyne.TextWrapWord
	s.after = container.NewHBox()

	left := container.NewVBox(form, container.NewHBox(s.start, s.cancel, s.resume), s.estimate)
	right := container.NewBorder(container.NewVBox(s.progress, s.stats), container.NewVBox(s.log, s.after), nil, nil, s.chart)
	split := container.NewHSplit(container.NewVScroll(left), right)
	split.Offset = 0.4
	s.content = split
	s.refreshModels()
	return s
}

func (s *trainScreen) refreshModels() {
	s.model.Options = s.u.modelNames()
	if s.model.Selected == "" && len(s.model.Options) > 0 {
		s.model.SetSelected(s.model.Options[0])
	}
	s.model.Refresh()
}

// setData fills the form from the Data screen.
func (s *trainScreen) setData(model, path string) {
	s.model.SetSelected(model)
	s.data.SetText(path)
}

func atoi(e *widget.Entry, def int) int {
	if v, err := strconv.Atoi(e.Text); err == nil {
		return v
	}
	return def
}

func (s *trainScreen) spec() (app.TrainSpec, error) {
	var spec app.TrainSpec
	spec.Model, spec.Data = s.model.Selected, s.data.Text
	spec.Iters, spec.BatchSize, spec.Rank = atoi(s.iters, 200), atoi(s.batch, 4), atoi(s.rank, 8)
	spec.NumLayers, spec.MaxSeqLength = atoi(s.layers, -1), atoi(s.maxSeq, 512)
	lr, err := strconv.ParseFloat(s.lr.Text, 64)
	if err != nil || lr <= 0 {
		return spec, fmt.Errorf("the learning rate %q is not a positive number", s.lr.Text)
	}
	spec.LearningRate = lr
	spec.StepsPerReport = max(1, min(spec.Iters/100, 10))
	spec.StepsPerEval = max(10, spec.Iters/10)
	spec.SaveEvery = max(10, spec.Iters/10)
	return spec, nil
}

// updateEstimate shows what the run will hold in memory before it starts.
func (s *trainScreen) updateEstimate() {
	if s.estimate == nil || s.model.Selected == "" {
		return
	}
	e, err := s.u.ws.EstimateTrainFor(s.u.ctx, s.model.Selected, atoi(s.batch, 4), atoi(s.maxSeq, 512), atoi(s.rank, 8), atoi(s.layers, -1))
	if err != nil {
		s.estimate.SetText("")
		return
	}
	s.estimate.SetText(estimateText(e))
}

// estimateText says what a run will hold, and what is done when memory is short.
func estimateText(e app.MemoryEstimate) string {
	text := fmt.Sprintf("This run should hold about %s in memory (weights %s, activations %s).", bytesText(e.Total()), bytesText(e.Weights), bytesText(e.Activations))
	if e.Available > 0 {
		text += fmt.Sprintf(" %s is available.", bytesText(e.Available))
		if e.Checkpointed {
			text += " That is with every block recomputed in the backward pass, since memory is short: each step takes about a third longer."
		}
		if e.Total() > e.Available {
			text += " It may not fit: lower the batch size or the max tokens per row, or use a quantized model."
		}
	}
	return text
}

func (s *trainScreen) startRun() {
	spec, err := s.spec()
	if err != nil {
		s.u.showError("Training cannot start", err)
		return
	}
	if spec.Data == "" {
		s.u.showError("Training cannot start", fmt.Errorf("choose the data to train on first (the Data screen shows what is in it)"))
		return
	}
	job, err := s.u.ws.StartTrain(s.u.ctx, spec)
	if err != nil {
		s.u.showError("Training cannot start", err)
		return
	}
	s.follow(job, spec.Model)
}

func (s *trainScreen) askResume() {
	var runs []app.RunRecord
	for _, st := range []app.RunStatus{"interrupted", "cancelled", "failed"} {
		rs, _ := s.u.ws.Store.Runs(s.u.ctx, app.RunFilter{Kind: "train", Status: st, Limit: 20})
		runs = append(runs, rs...)
	}
	if len(runs) == 0 {
		dialog.ShowInformation("Nothing to resume", "No training run was cut off. Runs stopped by a quit, a crash or Cancel appear here.", s.u.Win)
		return
	}
	labels := make([]string, len(runs))
	for i, r := range runs {
		labels[i] = fmt.Sprintf("Run %d · %s · %s · %s", r.ID, r.Model, r.Status, r.Created.Local().Format("Jan 2 15:04"))
	}
	pick := widget.NewSelect(labels, nil)
	pick.SetSelectedIndex(0)
	dialog.ShowForm("Resume from the last checkpoint", "Resume", "Cancel", []*widget.FormItem{widget.NewFormItem("Run", pick)}, func(ok bool) {
		if !ok {
			return
		}
		r := runs[pick.SelectedIndex()]
		job, err := s.u.ws.Resume(s.u.ctx, r.ID)
		if err != nil {
			s.u.showError("The run cannot resume", err)
			return
		}
		s.follow(job, r.Model)
	}, s.u.Win)
}

// follow shows a training job live until it ends.
func (s *trainScreen) follow(job *app.Job, model string) {
	s.job = job
	s.start.Disable()
	s.resume.Disable()
	s.cancel.Enable()
	s.chart.Clear()
	s.after.RemoveAll()
	s.progress.SetValue(0)
	s.progress.Show()
	s.stats.SetText(fmt.Sprintf("Run %d: starting…", job.RunID))
	s.log.SetText("")
	s.u.follow(job, func(p app.Progress) { s.onProgress(job, p) }, func(err error) { s.finished(job, model, err) })
}

func (s *trainScreen) onProgress(job *app.Job, p app.Progress) {
	switch p.Phase {
	case app.PhaseTrain:
		s.chart.Append("train loss", float64(p.Step), p.Loss)
		s.progress.SetValue(float64(p.Step) / float64(max(p.Steps, 1)))
		text := fmt.Sprintf("Run %d · step %d of %d · loss %.3f · %.0f tokens/s", job.RunID, p.Step, p.Steps, p.Loss, p.TokensPerSec)
		if p.Step < p.Steps {
			text += " · " + p.ETA.Round(time.Second).String() + " left"
		}
		if p.PeakMemory > 0 {
			text += " · memory " + bytesText(p.PeakMemory)
		}
		s.stats.SetText(text)
	case app.PhaseVal:
		s.chart.Append("validation loss", float64(p.Step), p.ValLoss)
	case app.PhaseCheckpoint:
		s.log.SetText(fmt.Sprintf("Checkpoint saved at step %d.", p.Step))
	case app.PhaseWarning:
		s.log.SetText("Note: " + p.Message)
	case app.PhaseTest:
		s.log.SetText(fmt.Sprintf("Test loss %.3f.", p.TestLoss))
	}
}

func (s *trainScreen) finished(job *app.Job, model string, err error) {
	s.job = nil
	s.start.Enable()
	s.resume.Enable()
	s.cancel.Disable()
	if err != nil {
		r, _ := s.u.ws.Store.Run(s.u.ctx, job.RunID)
		s.log.SetText(fmt.Sprintf("Run %d %s: %s. Resume it from its last checkpoint with “Resume a cut-off run…”.", job.RunID, r.Status, app.UserMessage(err)))
		return
	}
	var res struct {
		Steps   int     `json:"steps"`
		Loss    float64 `json:"train_loss"`
		Adapter string  `json:"adapter"`
	}
	_ = json.Unmarshal(job.Result(), &res)
	s.progress.SetValue(1)
	s.log.SetText(fmt.Sprintf("Done: %d steps, final loss %.3f. The adapter is in %s.", res.Steps, res.Loss, res.Adapter))
	chat := widget.NewButtonWithIcon("Chat with it", theme.MailComposeIcon(), func() {
		s.u.show("Chat")
		s.u.chat.refreshAdapters()
		s.u.chat.useAdapter(model, res.Adapter)
	})
	chat.Importance = widget.HighImportance
	fuse := widget.NewButtonWithIcon("Fuse into a new model", theme.ContentCopyIcon(), func() {
		go func() {
			f, err := s.u.ws.Fuse(s.u.ctx, app.FuseSpec{Model: model, Adapter: res.Adapter})
			s.u.do(func() {
				if err != nil {
					s.u.showError("Fusing failed", err)
					return
				}
				s.log.SetText(fmt.Sprintf("Fused into %s (%s); it is on the Models screen.", f.Name, f.Path))
			})
		}()
	})
	s.after.Objects = []fyne.CanvasObject{chat, fuse}
	s.after.Refresh()
}
