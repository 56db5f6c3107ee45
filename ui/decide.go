package ui

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/storage"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
	"github.com/inloop/inloop/internal/capped"
)

// decideScreen: a decision model from a task of typed questions. On the left the
// task (the sample, one defined here, or an imported file), its rows and a few
// settings; on the right the run live (loss and held-out accuracy per
// question), then for a trained model its calibration (the reliability diagram
// before and after, the coverage/accuracy table and the threshold), and a try-it
// box whose answers take thumbs: a confirmed answer is reinforced, a corrected
// one retrains (reinforce-or-retrain), and every change can be undone.
type decideScreen struct {
	u       *UI
	content fyne.CanvasObject

	model     *widget.Select
	task      *widget.Select
	taskPaths map[string]string // task label → app.SampleTask or a file
	taskInfo  *widget.Label
	rows      *widget.Entry
	rowsInfo  *widget.Label
	rowsSeq   int // the latest reading of the rows: an older one finishing late says nothing
	steps     *widget.Entry
	heldout   *widget.Entry
	maxRows   *widget.Entry
	headOnly  *widget.Check
	start     *widget.Button
	cancel    *widget.Button
	trained   *widget.Select
	dirs      map[string]string // trained-model label → folder

	results  *container.AppTabs
	progress *widget.ProgressBar
	stats    *widget.Label
	loss     *LineChart
	acc      *LineChart
	log      *widget.Label

	question    *widget.Select
	calInfo     *widget.Label
	reliability *LineChart
	coverage    *fyne.Container
	slider      *widget.Slider
	sliderInfo  *widget.Label
	useThresh   *widget.Button

	state    *widget.Entry
	decide   *widget.Button
	answers  *fyne.Container
	feedback *widget.Label
	undo     *widget.Button
	version  *widget.Select
	verInfo  *widget.Label

	job  *app.Job
	dir  string               // the decision model on show
	dm   *app.DecisionModel   // it, loaded: calibration, and answers until sess is ready
	sess *app.DecisionSession // it with reinforce-or-retrain: answers that take thumbs
	last []app.Decision       // the answers on show, for their thumbs
}

const sampleTaskLabel = "Support tickets (sample)"

// coverageRows are the thresholds the coverage table shows.
var coverageRows = []float64{0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99}

func newDecideScreen(u *UI) *decideScreen {
	s := &decideScreen{u: u, taskPaths: map[string]string{}, dirs: map[string]string{}}
	s.model = widget.NewSelect(nil, nil)
	s.task = widget.NewSelect(nil, func(string) { s.showTask() })
	s.taskInfo = widget.NewLabel("")
	s.taskInfo.Wrapping = fyne.TextWrapWord
	newTask := widget.NewButtonWithIcon("New task…", theme.ContentAddIcon(), s.defineTask)
	importTask := widget.NewButtonWithIcon("Import a task file…", theme.FolderOpenIcon(), func() {
		dialog.ShowFileOpen(func(r fyne.URIReadCloser, err error) {
			if err != nil || r == nil {
				return
			}
			r.Close()
			s.importTask(r.URI().Path())
		}, u.Win)
	})
	s.rows = widget.NewEntry()
	browse := widget.NewButtonWithIcon("", theme.FolderOpenIcon(), func() {
		d := dialog.NewFileOpen(func(r fyne.URIReadCloser, err error) {
			if err == nil && r != nil {
				r.Close()
				s.rows.SetText(r.URI().Path())
			}
		}, u.Win)
		d.SetFilter(storage.NewExtensionFileFilter([]string{".jsonl", ".json"}))
		d.Show()
	})
	s.rows.OnSubmitted = func(string) { s.showTask() }
	s.rowsInfo = widget.NewLabel("")
	s.rowsInfo.Wrapping = fyne.TextWrapWord
	field := func(v, hint string) *widget.Entry {
		e := widget.NewEntry()
		e.SetText(v)
		e.SetPlaceHolder(hint)
		return e
	}
	s.steps, s.heldout, s.maxRows = field("", "one pass over the rows"), field("0.2", ""), field("", "all")
	s.headOnly = widget.NewCheck("Train the head only (no LoRA)", nil)
	form := widget.NewForm(
		widget.NewFormItem("Model", s.model),
		widget.NewFormItem("Task", s.task),
		widget.NewFormItem("", container.NewHBox(newTask, importTask)),
		widget.NewFormItem("", s.taskInfo),
		widget.NewFormItem("Rows", container.NewBorder(nil, nil, nil, browse, s.rows)),
		widget.NewFormItem("", s.rowsInfo),
		widget.NewFormItem("Steps", s.steps),
		widget.NewFormItem("Held out", s.heldout),
		widget.NewFormItem("Training rows", s.maxRows),
		widget.NewFormItem("", s.headOnly),
	)
	s.start = widget.NewButtonWithIcon("Train decision model", theme.MediaPlayIcon(), s.startRun)
	s.start.Importance = widget.HighImportance
	s.cancel = widget.NewButtonWithIcon("Cancel", theme.MediaStopIcon(), func() {
		if s.job != nil {
			s.job.Cancel()
		}
	})
	s.cancel.Disable()
	s.trained = widget.NewSelect(nil, func(label string) {
		if dir := s.dirs[label]; dir != "" {
			s.open(dir)
		}
	})
	s.trained.PlaceHolder = "(none trained yet)"
	left := container.NewVBox(form, container.NewHBox(s.start, s.cancel),
		widget.NewSeparator(), widget.NewLabelWithStyle("Open a trained decision model", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), s.trained)

	s.results = container.NewAppTabs(
		container.NewTabItem("Training", s.buildTraining()),
		container.NewTabItem("Calibration", s.buildCalibration()),
		container.NewTabItem("Try it", s.buildTry()),
	)
	split := container.NewHSplit(container.NewVScroll(left), s.results)
	split.Offset = 0.4
	s.content = split
	// The pickers fill when the screen is first shown (refresh): reading the
	// rows runs in the background, which must not race with building the
	// window.
	return s
}

func (s *decideScreen) buildTraining() fyne.CanvasObject {
	s.progress = widget.NewProgressBar()
	s.progress.Hide()
	s.stats = widget.NewLabel("Pick a task and its rows, then train. The held-out share is set aside before training and never trained on; it calibrates the confidences.")
	s.stats.Wrapping = fyne.TextWrapWord
	s.loss = NewLineChart("step", "loss")
	s.loss.SetEmptyText("The loss appears after the first report")
	s.acc = NewLineChart("step", "held-out accuracy")
	s.acc.SetEmptyText("Held-out accuracy per question, from step 0 (zero-shot)")
	s.log = widget.NewLabel("")
	s.log.Wrapping = fyne.TextWrapWord
	return container.NewBorder(container.NewVBox(s.progress, s.stats), s.log, nil, nil, container.NewGridWithRows(2, s.loss, s.acc))
}

func (s *decideScreen) buildCalibration() fyne.CanvasObject {
	s.question = widget.NewSelect(nil, func(string) { s.showCalibration() })
	s.calInfo = widget.NewLabel("Train or open a decision model to see how far its confidence can be trusted.")
	s.calInfo.Wrapping = fyne.TextWrapWord
	s.reliability = NewLineChart("confidence", "accuracy")
	s.reliability.SetEmptyText("The reliability diagram: accuracy against confidence, per bin")
	s.coverage = container.NewGridWithColumns(3)
	s.slider = widget.NewSlider(0, 0.99)
	s.slider.Step = 0.01
	s.slider.OnChanged = func(float64) { s.showThreshold() }
	s.sliderInfo = widget.NewLabel("")
	s.sliderInfo.Wrapping = fyne.TextWrapWord
	s.useThresh = widget.NewButtonWithIcon("Use this threshold", theme.ConfirmIcon(), s.saveThreshold)
	s.useThresh.Disable()
	bottom := container.NewVBox(
		widget.NewLabelWithStyle("Escalate below a confidence of", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		container.NewBorder(nil, nil, nil, s.useThresh, s.slider), s.sliderInfo, s.coverage)
	top := container.NewVBox(container.NewBorder(nil, nil, widget.NewLabel("Question"), nil, s.question), s.calInfo)
	split := container.NewVSplit(s.reliability, container.NewVScroll(bottom))
	split.Offset = 0.55
	return container.NewBorder(top, nil, nil, nil, split)
}

func (s *decideScreen) buildTry() fyne.CanvasObject {
	s.state = widget.NewMultiLineEntry()
	s.state.Wrapping = fyne.TextWrapWord
	s.state.SetMinRowsVisible(5)
	s.state.SetPlaceHolder("Paste a ticket (or whatever your task decides about) and press Decide")
	s.decide = widget.NewButtonWithIcon("Decide", theme.MediaPlayIcon(), s.runDecide)
	s.decide.Importance = widget.HighImportance
	s.decide.Disable()
	s.answers = container.NewVBox()
	s.feedback = widget.NewLabel("")
	s.feedback.Wrapping = fyne.TextWrapWord
	s.undo = widget.NewButtonWithIcon("Undo last change", theme.ContentUndoIcon(), func() {
		s.changeVersion(func() (app.RoREvent, error) { return s.sess.Undo(s.u.ctx) })
	})
	s.undo.Disable()
	s.version = widget.NewSelect(nil, nil)
	s.version.PlaceHolder = "version"
	s.verInfo = widget.NewLabel("")
	history := container.NewHBox(s.undo, widget.NewLabel("Go back to"), s.version, s.verInfo)
	return container.NewBorder(container.NewVBox(s.state, container.NewHBox(s.decide)), container.NewVBox(s.feedback, history), nil, nil,
		container.NewVScroll(s.answers))
}

// refresh reloads the pickers: models, task files, trained decision models.
func (s *decideScreen) refresh() {
	names := s.u.modelNames()
	s.model.SetOptions(names)
	if s.model.Selected == "" && len(names) > 0 {
		s.model.SetSelected(names[0])
	}
	s.taskPaths = map[string]string{sampleTaskLabel: app.SampleTask}
	labels := []string{sampleTaskLabel}
	for _, p := range s.u.ws.DecisionTaskFiles() {
		l := strings.TrimSuffix(filepath.Base(p), ".json")
		s.taskPaths[l] = p
		labels = append(labels, l)
	}
	s.task.SetOptions(labels)
	if s.task.Selected == "" {
		s.task.SetSelected(sampleTaskLabel)
	}
	ms, err := s.u.ws.DecisionModels(s.u.ctx)
	if err != nil {
		s.u.showError("Reading the decision models", err)
		return
	}
	s.dirs = map[string]string{}
	var opts []string
	for _, m := range ms {
		l := fmt.Sprintf("%s on %s · %s", m.Name, m.Model, m.Created.Format("Jan 2 15:04"))
		s.dirs[l] = m.Adapter
		opts = append(opts, l)
	}
	s.trained.PlaceHolder = "(none trained yet)"
	if len(opts) > 0 {
		s.trained.PlaceHolder = fmt.Sprintf("Pick one of %d…", len(opts))
	}
	s.trained.SetOptions(opts)
}

// showTask reads the chosen task and rows and says what they hold.
func (s *decideScreen) showTask() {
	path := s.taskPaths[s.task.Selected]
	if path == "" {
		return
	}
	if path == app.SampleTask {
		s.rows.SetPlaceHolder("the sample's 2,000 generated tickets")
	} else {
		s.rows.SetPlaceHolder("a JSONL file of rows: {\"state\": …, \"answers\": {…}}")
	}
	t, _, err := app.ReadDecisionTask(path)
	if err != nil {
		s.taskInfo.SetText(app.UserMessage(err))
		return
	}
	s.taskInfo.SetText(fmt.Sprintf("%d questions: %s", len(t.Questions), app.TaskSummary(t)))
	rowsPath := strings.TrimSpace(s.rows.Text)
	if rowsPath == "" && path != app.SampleTask {
		s.rowsSeq++
		s.rowsInfo.SetText("")
		return
	}
	s.rowsSeq++
	seq := s.rowsSeq
	go func() {
		rep, err := app.ReadDecisionRows(t, path, rowsPath, true)
		s.u.do(func() {
			if seq != s.rowsSeq {
				return
			}
			if err != nil {
				s.rowsInfo.SetText(app.UserMessage(err))
				return
			}
			text := fmt.Sprintf("%d rows", len(rep.Rows))
			if rep.Bad > 0 {
				text += fmt.Sprintf("; %d bad lines left out", rep.Bad)
				for i, is := range rep.Issues {
					if i == 3 {
						text += "; …"
						break
					}
					text += "; " + is.Error()
				}
			}
			s.rowsInfo.SetText(text)
		})
	}()
}

// defineTask asks for a task's questions in a form and saves it as a task file.
func (s *decideScreen) defineTask() {
	name := widget.NewEntry()
	name.SetPlaceHolder("e.g. tickets")
	instruction := widget.NewEntry()
	instruction.SetPlaceHolder("what the model reads about, e.g. a customer support ticket")
	type qRow struct {
		name, instr, options *widget.Entry
		kind                 *widget.RadioGroup
	}
	var qs []qRow
	list := container.NewVBox()
	addQ := func() {
		r := qRow{name: widget.NewEntry(), instr: widget.NewEntry(), options: widget.NewEntry(), kind: widget.NewRadioGroup([]string{"Choice", "Yes/no"}, nil)}
		r.name.SetPlaceHolder("name, e.g. team")
		r.instr.SetPlaceHolder("the question, e.g. Which team should handle this ticket?")
		r.options.SetPlaceHolder("options, comma-separated: billing, technical, sales")
		r.kind.Horizontal = true
		r.kind.SetSelected("Choice")
		r.kind.OnChanged = func(k string) {
			if k == "Yes/no" {
				r.options.Disable()
			} else {
				r.options.Enable()
			}
		}
		qs = append(qs, r)
		list.Add(widget.NewForm(widget.NewFormItem(fmt.Sprintf("Question %d", len(qs)), r.name),
			widget.NewFormItem("", r.kind), widget.NewFormItem("", r.instr), widget.NewFormItem("", r.options)))
	}
	addQ()
	more := widget.NewButtonWithIcon("Add a question", theme.ContentAddIcon(), addQ)
	body := container.NewBorder(widget.NewForm(widget.NewFormItem("Task name", name), widget.NewFormItem("About", instruction)),
		more, nil, nil, container.NewVScroll(list))
	d := dialog.NewCustomConfirm("A new decision task", "Save", "Cancel", body, func(ok bool) {
		if !ok {
			return
		}
		task := map[string]any{"name": strings.TrimSpace(name.Text), "instruction": strings.TrimSpace(instruction.Text)}
		var questions []map[string]any
		for _, r := range qs {
			q := map[string]any{"name": strings.TrimSpace(r.name.Text), "instruction": strings.TrimSpace(r.instr.Text), "type": "choice"}
			if r.kind.Selected == "Yes/no" {
				q["type"] = "yesno"
			} else {
				var opts []string
				for _, o := range strings.Split(r.options.Text, ",") {
					if o = strings.TrimSpace(o); o != "" {
						opts = append(opts, o)
					}
				}
				q["options"] = opts
			}
			questions = append(questions, q)
		}
		task["questions"] = questions
		raw, _ := json.MarshalIndent(task, "", "  ")
		path, err := s.u.ws.SaveDecisionTask(raw)
		if err != nil {
			s.u.showError("The task was not saved", err)
			return
		}
		s.useTask(path)
	}, s.u.Win)
	d.Resize(fyne.NewSize(620, 560))
	d.Show()
}

// importTask copies a task file into the workspace and selects it.
func (s *decideScreen) importTask(path string) {
	raw, err := capped.ReadFile(path, 1<<20)
	if err == nil {
		path, err = s.u.ws.SaveDecisionTask(raw)
	}
	if err != nil {
		s.u.showError("The task was not imported", err)
		return
	}
	s.useTask(path)
}

func (s *decideScreen) useTask(path string) {
	s.refresh()
	s.rows.SetText("")
	s.task.SetSelected(strings.TrimSuffix(filepath.Base(path), ".json"))
}

func (s *decideScreen) spec() (app.DecideSpec, error) {
	spec := app.DecideSpec{Model: s.model.Selected, Task: s.taskPaths[s.task.Selected], Rows: strings.TrimSpace(s.rows.Text), HeadOnly: s.headOnly.Checked}
	if spec.Model == "" || spec.Task == "" {
		return spec, fmt.Errorf("pick a model and a task")
	}
	if spec.Task != app.SampleTask && spec.Rows == "" {
		return spec, fmt.Errorf("give the rows file to train on")
	}
	var err error
	num := func(e *widget.Entry, what string, f func(string) error) {
		if t := strings.TrimSpace(e.Text); t != "" && err == nil {
			if ferr := f(t); ferr != nil {
				err = fmt.Errorf("%s: %q is not a number", what, t)
			}
		}
	}
	num(s.steps, "steps", func(t string) (e error) { spec.Iters, e = strconv.Atoi(t); return })
	num(s.maxRows, "training rows", func(t string) (e error) { spec.MaxTrainRows, e = strconv.Atoi(t); return })
	num(s.heldout, "held out", func(t string) (e error) { spec.Heldout, e = strconv.ParseFloat(t, 64); return })
	if err == nil && (spec.Heldout < 0 || spec.Heldout >= 0.9) {
		err = fmt.Errorf("held out is the share of rows set aside: give one below 0.9 (empty or 0 for the default)")
	}
	return spec, err
}

func (s *decideScreen) startRun() {
	spec, err := s.spec()
	if err != nil {
		s.u.showError("", err)
		return
	}
	job, err := s.u.ws.StartDecideTrain(s.u.ctx, spec)
	if err != nil {
		s.u.showError("Training did not start", err)
		return
	}
	s.follow(job)
}

// follow shows a decision-training job live until it ends, then opens the model.
func (s *decideScreen) follow(job *app.Job) {
	s.job = job
	s.start.Disable()
	s.cancel.Enable()
	s.loss.Clear()
	s.acc.Clear()
	s.progress.SetValue(0)
	s.progress.Show()
	s.stats.SetText(fmt.Sprintf("Run %d: reading the rows and loading the model…", job.RunID))
	s.log.SetText("")
	s.results.SelectIndex(0)
	s.u.follow(job, func(p app.Progress) { s.onProgress(job, p) }, func(err error) { s.finished(job, err) })
}

func (s *decideScreen) onProgress(job *app.Job, p app.Progress) {
	switch p.Phase {
	case app.PhaseTrain:
		s.loss.Append("train loss", float64(p.Step), p.Loss)
		s.progress.SetValue(float64(p.Step) / float64(max(p.Steps, 1)))
		s.stats.SetText(fmt.Sprintf("Run %d · step %d of %d · loss %.3f", job.RunID, p.Step, p.Steps, p.Loss))
	case app.PhaseVal:
		s.loss.Append("held-out loss", float64(p.Step), p.ValLoss)
		for _, k := range slices.Sorted(maps.Keys(p.Values)) {
			if q, ok := strings.CutPrefix(k, "accuracy/"); ok {
				s.acc.Append(q, float64(p.Step), p.Values[k])
			}
		}
		s.log.SetText(capitalize(p.Message) + ".")
	case app.PhaseInfo, app.PhaseWarning:
		s.log.SetText(capitalize(p.Message) + ".")
	}
}

func (s *decideScreen) finished(job *app.Job, err error) {
	s.job = nil
	s.start.Enable()
	s.cancel.Disable()
	if err != nil {
		s.stats.SetText(fmt.Sprintf("Run %d stopped: %s.", job.RunID, app.UserMessage(err)))
		return
	}
	var res struct {
		Folder string  `json:"folder"`
		Steps  int     `json:"steps"`
		Secs   float64 `json:"seconds"`
	}
	_ = json.Unmarshal(job.Result(), &res)
	s.progress.SetValue(1)
	s.stats.SetText(fmt.Sprintf("Done: %d steps in %.0f s. The decision model is in %s.", res.Steps, res.Secs, res.Folder))
	s.refresh()
	if res.Folder != "" {
		s.open(res.Folder)
	}
}

// open shows the decision model in dir: its calibration as soon as it is
// loaded, then, once reinforce-or-retrain has scored its anchor set, answers
// that take thumbs.
func (s *decideScreen) open(dir string) {
	s.dir, s.dm, s.sess, s.last = dir, nil, nil, nil
	s.calInfo.SetText("Loading " + dir + "…")
	s.reliability.Clear()
	s.coverage.RemoveAll()
	s.answers.RemoveAll()
	s.feedback.SetText("")
	s.decide.Disable()
	s.results.SelectIndex(1)
	go func() {
		dm, err := s.u.ws.LoadDecisionModel(s.u.ctx, dir, "")
		s.u.do(func() {
			if s.dir != dir {
				return
			}
			if err != nil {
				s.calInfo.SetText("")
				s.u.showError("The decision model did not open", err)
				return
			}
			s.dm = dm
			var qs []string
			for _, q := range dm.Task.Questions {
				qs = append(qs, q.Name)
			}
			s.question.SetOptions(qs)
			s.question.SetSelected(qs[0]) // shows the calibration
			s.decide.Enable()
			s.feedback.SetText("Preparing feedback: scoring the held-out answers each correction is checked against…")
		})
		if err != nil {
			return
		}
		sess, err := s.u.ws.OpenDecisionSession(s.u.ctx, dir, app.RoROptions{})
		s.u.do(func() {
			if s.dir != dir {
				return
			}
			if err != nil {
				s.feedback.SetText("Answers cannot take feedback: " + app.UserMessage(err) + ".")
				return
			}
			s.sess = sess
			s.feedback.SetText("")
			s.showVersions()
			if s.last != nil {
				s.showAnswers(strings.TrimSpace(s.state.Text), s.last)
			}
		})
	}()
}

// showCalibration draws the chosen question's reliability diagram and coverage.
func (s *decideScreen) showCalibration() {
	if s.dm == nil {
		return
	}
	c := s.dm.Calibration.Questions[s.question.Selected]
	if c == nil {
		s.calInfo.SetText("This question had no held-out rows to calibrate on.")
		return
	}
	text := fmt.Sprintf("Held out: %d answers · accuracy %.1f%% (zero-shot %.1f%%) · ECE %.3f before calibration, %.3f after (temperature %.2f).",
		c.N, 100*c.After.Accuracy, 100*c.ZeroShot.Accuracy, c.Before.ECE, c.After.ECE, c.Temperature)
	if c.CrossFittedECE != nil {
		text += fmt.Sprintf(" Cross-fitted ECE %.3f.", *c.CrossFittedECE)
	}
	s.calInfo.SetText(text)
	curve := func(name string, bins []app.ReliabilityBin) Series {
		sr := Series{Name: name}
		for _, b := range bins {
			if b.Count > 0 {
				sr.X, sr.Y = append(sr.X, b.Confidence), append(sr.Y, b.Accuracy)
			}
		}
		return sr
	}
	s.reliability.SetSeries(Series{Name: "perfectly calibrated", X: []float64{0, 1}, Y: []float64{0, 1}},
		curve("before calibration", c.Before.Bins), curve("after calibration", c.After.Bins))
	s.coverage.RemoveAll()
	for _, h := range []string{"Confidence at least", "Decided automatically", "Of those, right"} {
		s.coverage.Add(widget.NewLabelWithStyle(h, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
	}
	for _, t := range coverageRows {
		p, ok := coverageAt(c.Coverage, t)
		if !ok {
			continue
		}
		s.coverage.Add(widget.NewLabel(fmt.Sprintf("%.2f", t)))
		s.coverage.Add(widget.NewLabel(fmt.Sprintf("%.1f%%", 100*p.Coverage)))
		right := "—"
		if p.N > 0 {
			right = fmt.Sprintf("%.1f%% of %d", 100*p.Accuracy, p.N)
		}
		s.coverage.Add(widget.NewLabel(right))
	}
	s.slider.SetValue(c.Threshold)
	s.showThreshold()
	s.useThresh.Disable() // nothing to save until the slider moves
}

// coverageAt is the coverage point at threshold t (the table has one per 0.01).
func coverageAt(points []app.CoveragePoint, t float64) (app.CoveragePoint, bool) {
	best, ok := app.CoveragePoint{}, false
	for _, p := range points {
		if math.Abs(p.Threshold-t) < 0.005 {
			return p, true
		}
		if p.Threshold <= t && (!ok || p.Threshold > best.Threshold) {
			best, ok = p, true
		}
	}
	return best, ok
}

// showThreshold says what the slider's threshold would do.
func (s *decideScreen) showThreshold() {
	if s.dm == nil {
		return
	}
	c := s.dm.Calibration.Questions[s.question.Selected]
	if c == nil {
		return
	}
	t := s.slider.Value
	p, ok := coverageAt(c.Coverage, t)
	if !ok {
		return
	}
	s.sliderInfo.SetText(fmt.Sprintf("At %.2f, %.1f%% of held-out answers are decided automatically and %.1f%% of them are right; %.1f%% go to a person. Now %.2f.",
		t, 100*p.Coverage, 100*p.Accuracy, 100*(1-p.Coverage), c.Threshold))
	if math.Abs(t-c.Threshold) > 1e-9 {
		s.useThresh.Enable()
	} else {
		s.useThresh.Disable()
	}
}

func (s *decideScreen) saveThreshold() {
	if s.dm == nil {
		return
	}
	q, t := s.question.Selected, s.slider.Value
	err := s.dm.SetThreshold(q, t)
	if err == nil && s.sess != nil {
		err = s.sess.SetThreshold(q, t)
	} else if err == nil {
		err = s.u.ws.SetDecisionThreshold(s.u.ctx, s.dir, q, t)
	}
	if err != nil {
		s.u.showError("The threshold was not saved", err)
		return
	}
	s.showThreshold()
}

// runDecide answers the try-it box.
func (s *decideScreen) runDecide() {
	state := strings.TrimSpace(s.state.Text)
	if s.dm == nil || state == "" {
		return
	}
	s.decide.Disable()
	sess, dm := s.sess, s.dm
	go func() {
		var ds []app.Decision
		var err error
		if sess != nil {
			ds, err = sess.Decide(s.u.ctx, state)
		} else {
			var out [][]app.Decision
			var cut []bool
			if out, cut, err = dm.Decide(s.u.ctx, []string{state}); err == nil {
				ds = out[0]
				if cut[0] {
					err = fmt.Errorf("the text is longer than the model reads: its end was cut")
				}
			}
		}
		s.u.do(func() {
			s.decide.Enable()
			if err != nil && ds == nil {
				s.u.showError("No decision", err)
				return
			}
			if err != nil {
				s.feedback.SetText(capitalize(app.UserMessage(err)) + ".")
			}
			s.showAnswers(state, ds)
		})
	}()
}

// showAnswers lays out each question's answer: the choice, its calibrated
// confidence, whether it escalates, every option's probability, and thumbs.
func (s *decideScreen) showAnswers(state string, ds []app.Decision) {
	s.last = ds
	s.answers.RemoveAll()
	for _, d := range ds {
		head := fmt.Sprintf("%s: %s · %.0f%% confident", d.Question, d.Choice, 100*d.Confidence)
		if p := d.Probs[d.Choice]; math.Abs(p-d.Confidence) >= 0.005 {
			head += fmt.Sprintf(" after your feedback (the model says %.0f%%)", 100*p)
		}
		if d.Escalate {
			head += " · below the threshold: ask a person"
		} else {
			head += " · decided"
		}
		title := widget.NewLabelWithStyle(head, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
		opts := slices.SortedFunc(maps.Keys(d.Probs), func(a, b string) int {
			if d.Probs[a] != d.Probs[b] {
				if d.Probs[a] > d.Probs[b] {
					return -1
				}
				return 1
			}
			return strings.Compare(a, b)
		})
		bars := container.New(layout.NewFormLayout())
		for _, o := range opts {
			bar := widget.NewProgressBar()
			bar.SetValue(d.Probs[o])
			bar.TextFormatter = func() string { return fmt.Sprintf("%.1f%%", 100*bar.Value) }
			bars.Add(widget.NewLabel(o))
			bars.Add(bar)
		}
		d := d
		right := widget.NewButtonWithIcon("Right", theme.ConfirmIcon(), func() {
			s.thumb(func() (app.RoREvent, error) { return s.sess.ThumbUp(s.u.ctx, state, d.Question, d.Choice) }, state)
		})
		wrong := widget.NewButtonWithIcon("Wrong…", theme.CancelIcon(), func() { s.askCorrection(state, d) })
		if s.sess == nil {
			right.Disable()
			wrong.Disable()
		}
		s.answers.Add(container.NewVBox(title, bars, container.NewHBox(right, wrong), widget.NewSeparator()))
	}
}

// askCorrection asks for the right option; without one the answer is only
// recorded as wrong and offered for escalation.
func (s *decideScreen) askCorrection(state string, d app.Decision) {
	const dontKnow = "I don't know the right one"
	var opts []string
	for o := range d.Probs {
		if o != d.Choice {
			opts = append(opts, o)
		}
	}
	slices.Sort(opts)
	pick := widget.NewRadioGroup(append(opts, dontKnow), nil)
	pick.SetSelected(dontKnow)
	msg := widget.NewLabel(fmt.Sprintf("The model said %q. Which is right? A correction takes a gradient step, checked against held-out answers and rolled back if they get worse.", d.Choice))
	msg.Wrapping = fyne.TextWrapWord
	dlg := dialog.NewCustomConfirm("Correct "+d.Question, "Send", "Cancel", container.NewVBox(msg, pick), func(ok bool) {
		if !ok {
			return
		}
		correct := pick.Selected
		if correct == dontKnow {
			correct = ""
		}
		s.correct(state, d.Question, correct)
	}, s.u.Win)
	dlg.Resize(fyne.NewSize(460, 300))
	dlg.Show()
}

// correct says the answer to question is wrong, and which option is right
// ("" when the user does not know).
func (s *decideScreen) correct(state, question, option string) {
	s.thumb(func() (app.RoREvent, error) { return s.sess.ThumbDown(s.u.ctx, state, question, option) }, state)
}

// thumb sends feedback, says what it did, and answers again with the version
// now in use.
func (s *decideScreen) thumb(send func() (app.RoREvent, error), state string) {
	s.feedback.SetText("Learning…")
	go func() {
		ev, err := send()
		var ds []app.Decision
		if err == nil {
			ds, _ = s.sess.Decide(s.u.ctx, state)
		}
		s.u.do(func() {
			if err != nil {
				s.feedback.SetText("")
				s.u.showError("The feedback was not taken", err)
				return
			}
			s.feedback.SetText(describeRoR(ev))
			if ds != nil {
				s.showAnswers(state, ds)
			}
			s.showVersions()
		})
	}()
}

// changeVersion runs an undo or restore and shows the answers again.
func (s *decideScreen) changeVersion(do func() (app.RoREvent, error)) {
	if s.sess == nil {
		return
	}
	s.thumb(do, strings.TrimSpace(s.state.Text))
}

// showVersions fills the version history.
func (s *decideScreen) showVersions() {
	if s.sess == nil {
		return
	}
	vs := s.sess.Versions()
	cur := s.sess.Version()
	labels := make([]string, len(vs))
	for i, v := range vs {
		labels[i] = fmt.Sprintf("version %d", v)
	}
	s.version.OnChanged = nil
	s.version.SetOptions(labels)
	s.version.SetSelected(fmt.Sprintf("version %d", cur))
	s.version.OnChanged = func(l string) {
		v, err := strconv.ParseUint(strings.TrimPrefix(l, "version "), 10, 64)
		if err != nil || v == s.sess.Version() {
			return
		}
		s.changeVersion(func() (app.RoREvent, error) { return s.sess.RestoreVersion(s.u.ctx, v) })
	}
	s.verInfo.SetText(fmt.Sprintf("Held-out accuracy %.1f%%", 100*s.sess.AnchorAccuracy()))
	if len(vs) > 1 && cur != vs[0] {
		s.undo.Enable()
	} else {
		s.undo.Disable()
	}
}

// describeRoR says in a sentence what a thumb, undo or restore did.
func describeRoR(ev app.RoREvent) string {
	switch ev.Kind {
	case app.RoRReinforce:
		return fmt.Sprintf("Confirmed: kept as an example to replay (%.1f ms). No weights changed.", ev.MS)
	case app.RoRRecord:
		return fmt.Sprintf("Recorded as wrong: answers this confident on %s are trusted less now (%.0f%% → %.0f%%), and this one goes to a person.",
			ev.Question, 100*ev.Confidence, 100*ev.Adjusted)
	case app.RoRRetrain:
		flip := "it does not prefer the correction yet"
		if ev.Flipped {
			flip = "it now prefers the correction"
		}
		return fmt.Sprintf("Retrained in %d step(s), %.1f ms: %s; held-out accuracy %.1f%% → %.1f%%. Version %d.",
			ev.Steps, ev.MS, flip, 100*ev.AnchorBefore, 100*ev.AnchorAfter, ev.VersionAfter)
	case app.RoRRollback:
		return fmt.Sprintf("Rolled back: the step would have dropped held-out accuracy from %.1f%% to %.1f%%, so the model is unchanged.",
			100*ev.AnchorBefore, 100*ev.AnchorAfter)
	case app.RoRUndo, app.RoRRestore:
		return fmt.Sprintf("Back to version %d (from %d).", ev.VersionAfter, ev.VersionBefore)
	}
	return string(ev.Kind)
}
