package ui

import (
	"encoding/json"
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// Recommended is the real model offered for download on first run.
const (
	RecommendedRepo = "mlx-community/Qwen3-0.6B-4bit"
	RecommendedSize = "about 350 MB"
)

// modelsScreen: the models Inloop knows, whether each fits this machine, and the
// three things one does to a model here: open a folder, download, quantize.
type modelsScreen struct {
	u       *UI
	content fyne.CanvasObject

	table    *widget.Table
	models   []app.ModelInfo
	fits     []app.Fit
	selected int

	job      *app.Job
	progress *widget.ProgressBar
	jobLabel *widget.Label
	cancel   *widget.Button
	quantize *widget.Button
}

var modelColumns = []struct {
	title string
	width float32
}{{"Name", 240}, {"Architecture", 100}, {"Parameters", 100}, {"Bits", 60}, {"On disk", 90}, {"Fits for chat", 110}, {"Fits for LoRA", 110}}

func newModelsScreen(u *UI) *modelsScreen {
	s := &modelsScreen{u: u, selected: -1}
	s.table = widget.NewTableWithHeaders(
		func() (int, int) { return len(s.models), len(modelColumns) },
		func() fyne.CanvasObject { return widget.NewLabel("") },
		func(id widget.TableCellID, o fyne.CanvasObject) { o.(*widget.Label).SetText(s.cell(id.Row, id.Col)) })
	s.table.CreateHeader = func() fyne.CanvasObject {
		return widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	}
	s.table.UpdateHeader = func(id widget.TableCellID, o fyne.CanvasObject) {
		l := o.(*widget.Label)
		if id.Row < 0 && id.Col >= 0 {
			l.SetText(modelColumns[id.Col].title)
		} else {
			l.SetText("")
		}
	}
	s.table.ShowHeaderColumn = false
	for i, c := range modelColumns {
		s.table.SetColumnWidth(i, c.width)
	}
	s.table.OnSelected = func(id widget.TableCellID) {
		s.selected = id.Row
		if s.job == nil {
			s.quantize.Enable()
		}
	}
	s.progress = widget.NewProgressBar()
	s.progress.Hide()
	s.jobLabel = widget.NewLabel("")
	s.jobLabel.Wrapping = fyne.TextWrapWord
	s.cancel = widget.NewButtonWithIcon("Cancel", theme.CancelIcon(), func() {
		if s.job != nil {
			s.job.Cancel()
		}
	})
	s.cancel.Hide()

	open := widget.NewButtonWithIcon("Open a model folder…", theme.FolderOpenIcon(), s.openFolder)
	download := widget.NewButtonWithIcon("Download…", theme.DownloadIcon(), s.askDownload)
	recommended := widget.NewButtonWithIcon("Get "+RecommendedRepo+" ("+RecommendedSize+")", theme.DownloadIcon(), func() { s.download(RecommendedRepo) })
	recommended.Importance = widget.HighImportance
	s.quantize = widget.NewButtonWithIcon("Quantize selected…", theme.ViewRestoreIcon(), s.askQuantize)
	s.quantize.Disable()
	intro := widget.NewLabel("The demo model is ready to use. For real work, download a model from Hugging Face — the only thing Inloop ever sends over the network, and only when you ask.")
	intro.Wrapping = fyne.TextWrapWord
	top := container.NewVBox(intro, container.NewHBox(recommended, download, open, s.quantize))
	bottom := container.NewVBox(s.jobLabel, container.NewBorder(nil, nil, nil, s.cancel, s.progress))
	s.content = container.NewBorder(top, bottom, nil, nil, s.table)
	s.refresh()
	return s
}

func (s *modelsScreen) cell(row, col int) string {
	if row >= len(s.models) {
		return ""
	}
	m, f := s.models[row], s.fits[row]
	yes := func(ok bool, n int64) string {
		if f.Available == 0 {
			return "unknown"
		}
		if ok {
			return "yes (" + bytesText(n) + ")"
		}
		return "no (" + bytesText(n) + ")"
	}
	switch col {
	case 0:
		return m.Name
	case 1:
		return m.Architecture
	case 2:
		return paramsText(m.Params)
	case 3:
		if m.Bits == 0 {
			return "16/32"
		}
		return fmt.Sprint(m.Bits)
	case 4:
		return bytesText(m.Bytes)
	case 5:
		return yes(f.Chat, f.ChatBytes)
	case 6:
		return yes(f.LoRA, f.LoRABytes)
	}
	return ""
}

func (s *modelsScreen) refresh() {
	ms, err := s.u.ws.Models(s.u.ctx)
	if err != nil {
		s.u.showError("The model list could not be read", err)
		return
	}
	s.models, s.fits = ms, make([]app.Fit, len(ms))
	for i, m := range ms {
		s.fits[i] = app.FitOf(s.u.ws.Backend, m)
	}
	s.table.Refresh()
}

func (s *modelsScreen) openFolder() {
	dialog.ShowFolderOpen(func(dir fyne.ListableURI, err error) {
		if err != nil || dir == nil {
			s.u.showError("", err)
			return
		}
		if _, err := s.u.ws.RegisterModel(s.u.ctx, dir.Path(), "", "folder"); err != nil {
			s.u.showError("That folder is not a model Inloop can read", err)
			return
		}
		s.refresh()
	}, s.u.Win)
}

func (s *modelsScreen) askDownload() {
	repo := widget.NewEntry()
	repo.SetPlaceHolder("ORG/NAME, e.g. " + RecommendedRepo)
	dialog.ShowForm("Download a model from Hugging Face", "Download", "Cancel", []*widget.FormItem{widget.NewFormItem("Model", repo)}, func(ok bool) {
		if ok && strings.TrimSpace(repo.Text) != "" {
			s.download(strings.TrimSpace(repo.Text))
		}
	}, s.u.Win)
}

func (s *modelsScreen) download(repo string) {
	job, err := s.u.ws.StartPull(s.u.ctx, app.PullSpec{Repo: repo})
	if err != nil {
		s.u.showError("The download could not start", err)
		return
	}
	s.watch(job, "Downloading "+repo, func(p app.Progress) {
		if p.Phase == app.PhaseDownload && p.Total > 0 {
			s.progress.SetValue(float64(p.Done) / float64(p.Total))
			s.jobLabel.SetText(fmt.Sprintf("Downloading %s: %s, %s of %s", repo, p.File, bytesText(p.Done), bytesText(p.Total)))
		}
	}, func(err error) string {
		if err != nil {
			return "The download of " + repo + " stopped: " + app.UserMessage(err) + ". Start it again to resume."
		}
		return repo + " is downloaded and ready."
	})
}

func (s *modelsScreen) askQuantize() {
	if s.selected < 0 || s.selected >= len(s.models) {
		return
	}
	m := s.models[s.selected]
	bits := widget.NewRadioGroup([]string{"4-bit", "8-bit"}, nil)
	bits.SetSelected("4-bit")
	dialog.ShowForm("Quantize "+m.Name, "Quantize", "Cancel", []*widget.FormItem{widget.NewFormItem("Precision", bits)}, func(ok bool) {
		if !ok {
			return
		}
		b := 4
		if bits.Selected == "8-bit" {
			b = 8
		}
		job, err := s.u.ws.StartQuantize(s.u.ctx, app.QuantizeSpec{Model: m.Path, Bits: b})
		if err != nil {
			s.u.showError("Quantization could not start", err)
			return
		}
		s.watch(job, fmt.Sprintf("Quantizing %s to %d bits", m.Name, b), func(p app.Progress) {
			if p.Phase == app.PhaseInfo {
				s.jobLabel.SetText(capitalize(p.Message) + "…")
			}
		}, func(err error) string {
			if err != nil {
				return "Quantization failed: " + app.UserMessage(err)
			}
			var r app.QuantizeResult
			_ = json.Unmarshal(job.Result(), &r)
			return fmt.Sprintf("Quantized to %d bits: %s → %s on disk, perplexity %.2f → %.2f (%+.1f%%).", b,
				bytesText(r.BytesBefore), bytesText(r.BytesAfter), r.PerplexityBefore, r.PerplexityAfter, 100*(r.PerplexityAfter/r.PerplexityBefore-1))
		})
	}, s.u.Win)
}

// watch shows a job's progress until it ends, then its outcome.
func (s *modelsScreen) watch(job *app.Job, title string, onEvent func(app.Progress), outcome func(error) string) {
	s.job = job
	s.jobLabel.SetText(title + "…")
	s.progress.SetValue(0)
	s.progress.Show()
	s.cancel.Show()
	s.quantize.Disable()
	s.u.follow(job, onEvent, func(err error) {
		s.job = nil
		s.progress.Hide()
		s.cancel.Hide()
		s.jobLabel.SetText(outcome(err))
		if s.selected >= 0 {
			s.quantize.Enable()
		}
		s.refresh()
	})
}

func paramsText(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.0fK", float64(n)/1e3)
}
