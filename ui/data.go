package ui

import (
	"context"
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// dataScreen: import a JSONL file or a folder of documents, see what a run would
// train on (rows, tokens, splits, every problem), and watch a folder for changes.
type dataScreen struct {
	u       *UI
	content fyne.CanvasObject

	model    *widget.Select
	path     string
	summary  *widget.Label
	problems *widget.List
	probs    []string
	preview  *widget.List
	rows     []string
	files    *widget.List
	verdicts []string // a line per file of a documents folder: read, skipped or failed, and why
	watch    *widget.Check
	changed  *widget.Label
	reload   *widget.Button
	trainBtn *widget.Button

	stopWatch context.CancelFunc
}

func newDataScreen(u *UI) *dataScreen {
	s := &dataScreen{u: u}
	s.model = widget.NewSelect(nil, func(string) { s.load() })
	s.summary = widget.NewLabel("Choose a JSONL file (mlx-lm formats: text, prompt/completion, chat), a folder with train/valid/test.jsonl, or a folder of your documents (PDF, Word, Excel, CSV, PowerPoint, mail, web pages, EPUB, text).")
	s.summary.Wrapping = fyne.TextWrapWord
	s.problems = widget.NewList(func() int { return len(s.probs) },
		func() fyne.CanvasObject { l := widget.NewLabel(""); l.Wrapping = fyne.TextWrapWord; return l },
		func(i widget.ListItemID, o fyne.CanvasObject) { o.(*widget.Label).SetText(s.probs[i]) })
	s.preview = widget.NewList(func() int { return len(s.rows) },
		func() fyne.CanvasObject { l := widget.NewLabel(""); l.Truncation = fyne.TextTruncateEllipsis; return l },
		func(i widget.ListItemID, o fyne.CanvasObject) { o.(*widget.Label).SetText(s.rows[i]) })
	s.files = widget.NewList(func() int { return len(s.verdicts) },
		func() fyne.CanvasObject { l := widget.NewLabel(""); l.Truncation = fyne.TextTruncateEllipsis; return l },
		func(i widget.ListItemID, o fyne.CanvasObject) { o.(*widget.Label).SetText(s.verdicts[i]) })
	s.watch = widget.NewCheck("Watch this folder for changes", s.setWatch)
	s.watch.Disable()
	s.changed = widget.NewLabel("")
	s.reload = widget.NewButtonWithIcon("Reload", theme.ViewRefreshIcon(), s.load)
	s.reload.Hide()
	s.trainBtn = widget.NewButtonWithIcon("Train on this", theme.MediaPlayIcon(), func() {
		s.u.train.setData(s.model.Selected, s.path)
		s.u.show("Train")
	})
	s.trainBtn.Importance = widget.HighImportance
	s.trainBtn.Disable()

	file := widget.NewButtonWithIcon("Open a JSONL file…", theme.FileIcon(), func() {
		dialog.ShowFileOpen(func(r fyne.URIReadCloser, err error) {
			if err != nil || r == nil {
				s.u.showError("", err)
				return
			}
			r.Close()
			s.open(r.URI().Path())
		}, s.u.Win)
	})
	folder := widget.NewButtonWithIcon("Open a folder…", theme.FolderOpenIcon(), func() {
		dialog.ShowFolderOpen(func(d fyne.ListableURI, err error) {
			if err != nil || d == nil {
				s.u.showError("", err)
				return
			}
			s.open(d.Path())
		}, s.u.Win)
	})
	typed := widget.NewEntry()
	typed.SetPlaceHolder("or paste a path and press Enter")
	typed.OnSubmitted = func(p string) {
		if p != "" {
			s.open(p)
		}
	}
	top := container.NewVBox(
		container.NewBorder(nil, nil, widget.NewLabel("Tokenize for"), nil, s.model),
		container.NewBorder(nil, nil, container.NewHBox(file, folder), s.trainBtn, typed),
		s.summary,
		container.NewHBox(s.watch, s.changed, s.reload))
	checks := container.NewAppTabs(
		container.NewTabItem("Files", s.files),
		container.NewTabItem("Problems", s.problems))
	lists := container.NewVSplit(checks,
		container.NewBorder(widget.NewLabelWithStyle("First examples", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), nil, nil, nil, s.preview))
	lists.Offset = 0.35
	s.content = container.NewBorder(top, nil, nil, nil, lists)
	s.refreshModels()
	return s
}

func (s *dataScreen) refreshModels() {
	s.model.Options = s.u.modelNames()
	if s.model.Selected == "" && len(s.model.Options) > 0 {
		s.model.Selected = s.model.Options[0]
	}
	s.model.Refresh()
}

// open reads path as the chosen model's training data.
func (s *dataScreen) open(path string) {
	s.path = path
	s.watch.SetChecked(false)
	s.load()
}

func (s *dataScreen) load() {
	if s.path == "" {
		return
	}
	s.summary.SetText("Reading " + s.path + "…")
	s.changed.SetText("")
	s.reload.Hide()
	path, model := s.path, s.model.Selected
	go func() {
		// A folder of documents reports each file read, with the time left.
		progress := func(p app.Progress) {
			s.u.do(func() {
				if s.path == path {
					s.summary.SetText("Reading " + path + ": " + strings.TrimPrefix(p.Message, "reading documents: ") + "…")
				}
			})
		}
		sum, err := s.u.ws.InspectDataProgress(s.u.ctx, model, path, progress)
		s.u.do(func() { s.show(sum, err) })
	}()
}

func (s *dataScreen) show(sum app.DataSummary, err error) {
	s.probs, s.rows = sum.Problems, sum.Preview
	s.verdicts = s.verdicts[:0]
	for _, v := range sum.Verdicts {
		s.verdicts = append(s.verdicts, v.String())
	}
	if len(s.verdicts) == 0 && sum.Kind != "" {
		s.verdicts = append(s.verdicts, "Not a folder of documents: see the rows' problems.")
	}
	s.files.Refresh()
	if len(s.probs) == 0 && err == nil {
		s.probs = []string{"None: every row is usable."}
	}
	s.problems.Refresh()
	s.preview.Refresh()
	if err != nil {
		s.summary.SetText(fmt.Sprintf("%s cannot be trained on: %s", sum.Path, app.UserMessage(err)))
		s.trainBtn.Disable()
		return
	}
	what := map[string]string{"jsonl": "a JSONL file", "splits": "a data folder (train/valid/test)", "documents": fmt.Sprintf("a folder of %d documents", sum.Files)}[sum.Kind]
	text := fmt.Sprintf("%s is %s: %d training examples (%s tokens)", sum.Path, what, sum.Train, countText(sum.Tokens))
	if sum.Valid > 0 || sum.Test > 0 {
		text += fmt.Sprintf(", %d for validation, %d for test", sum.Valid, sum.Test)
	} else {
		text += ", no validation split"
	}
	if n := len(sum.Problems); n > 0 {
		text += fmt.Sprintf(". %d problems are listed below; those rows are left out", n)
	}
	if skipped := len(sum.Verdicts) - sum.Files; sum.Kind == "documents" && skipped > 0 {
		text += fmt.Sprintf(". %d other %s skipped or failed: see Files", skipped, plural(skipped, "file was", "files were"))
	}
	s.summary.SetText(text + ".")
	s.trainBtn.Enable()
	if sum.Kind == "documents" {
		s.watch.Enable()
	} else {
		s.watch.Disable()
	}
}

func (s *dataScreen) setWatch(on bool) {
	if s.stopWatch != nil {
		s.stopWatch()
		s.stopWatch = nil
	}
	if !on {
		s.changed.SetText("")
		return
	}
	ctx, cancel := context.WithCancel(s.u.ctx)
	changes, err := s.u.ws.WatchData(ctx, s.model.Selected, s.path)
	if err != nil {
		cancel()
		s.u.showError("The folder cannot be watched", err)
		s.watch.SetChecked(false)
		return
	}
	s.stopWatch = cancel
	s.changed.SetText("Watching: no changes yet")
	go func() {
		for n := range changes {
			s.u.do(func() {
				s.changed.SetText(fmt.Sprintf("%d %s changed", n, plural(n, "file", "files")))
				s.reload.Show()
			})
		}
	}()
}

func countText(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
