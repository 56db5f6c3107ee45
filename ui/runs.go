package ui

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// runsScreen: every job ever started, from the store: status, curves and final
// figures; two training runs compared on one chart; delete.
type runsScreen struct {
	u       *UI
	content fyne.CanvasObject

	list     *widget.List
	runs     []app.RunRecord
	selected int

	title   *widget.Label
	detail  *widget.Label
	chart   *LineChart
	compare *widget.Select
	del     *widget.Button
	resume  *widget.Button
}

func newRunsScreen(u *UI) *runsScreen {
	s := &runsScreen{u: u, selected: -1}
	s.list = widget.NewList(func() int { return len(s.runs) },
		func() fyne.CanvasObject {
			return container.NewVBox(widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), widget.NewLabel(""))
		},
		func(i widget.ListItemID, o fyne.CanvasObject) {
			r := s.runs[i]
			box := o.(*fyne.Container)
			box.Objects[0].(*widget.Label).SetText(fmt.Sprintf("%d · %s %s · %s", r.ID, r.Kind, r.Model, r.Status))
			box.Objects[1].(*widget.Label).SetText(r.Created.Local().Format("Mon Jan 2 15:04") + "  " + headline(r))
		})
	s.list.OnSelected = func(i widget.ListItemID) { s.selected = i; s.show() }
	s.title = widget.NewLabelWithStyle("Choose a run on the left.", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	s.detail = widget.NewLabel("")
	s.detail.Wrapping = fyne.TextWrapWord
	s.chart = NewLineChart("step", "loss")
	s.chart.SetEmptyText("Pick a run to see its curves")
	s.compare = widget.NewSelect(nil, func(string) { s.show() })
	s.compare.PlaceHolder = "Compare with…"
	s.del = widget.NewButtonWithIcon("Delete", theme.DeleteIcon(), s.deleteRun)
	s.resume = widget.NewButtonWithIcon("Resume", theme.MediaReplayIcon(), s.resumeRun)
	s.del.Disable()
	s.resume.Disable()
	refresh := widget.NewButtonWithIcon("Refresh", theme.ViewRefreshIcon(), s.refresh)

	body := container.NewVSplit(s.chart, container.NewVScroll(s.detail))
	body.Offset = 0.62
	right := container.NewBorder(container.NewVBox(s.title, container.NewHBox(s.compare, s.resume, s.del)), nil, nil, nil, body)
	split := container.NewHSplit(container.NewBorder(refresh, nil, nil, nil, s.list), right)
	split.Offset = 0.32
	s.content = split
	s.refresh()
	return s
}

func (s *runsScreen) refresh() {
	runs, err := s.u.ws.Store.Runs(s.u.ctx, app.RunFilter{Limit: 500})
	if err != nil {
		s.u.showError("The run history could not be read", err)
		return
	}
	s.runs = runs
	opts := []string{"(none)"}
	for _, r := range runs {
		if r.Kind == "train" {
			opts = append(opts, fmt.Sprintf("Run %d", r.ID))
		}
	}
	s.compare.Options = opts
	s.list.Refresh()
	if s.selected >= len(runs) {
		s.selected = -1
	}
	s.show()
}

func (s *runsScreen) show() {
	if s.selected < 0 || s.selected >= len(s.runs) {
		s.title.SetText("Choose a run on the left.")
		if len(s.runs) == 0 {
			s.title.SetText("No runs yet. Training, quantizing and downloading on the Train and Models screens are remembered here.")
		}
		s.detail.SetText("")
		s.chart.Clear()
		s.chart.SetEmptyText("Pick a run to see its curves")
		s.del.Disable()
		s.resume.Disable()
		return
	}
	r := s.runs[s.selected]
	s.title.SetText(fmt.Sprintf("Run %d: %s of %s — %s", r.ID, r.Kind, r.Model, r.Status))
	if r.Status == "running" {
		s.del.Disable() // cancel it on the Train screen first
	} else {
		s.del.Enable()
	}
	if r.Status == "interrupted" || r.Status == "cancelled" || r.Status == "failed" {
		s.resume.Enable()
	} else {
		s.resume.Disable()
	}
	s.detail.SetText(runDetail(r))
	s.chart.SetEmptyText("No curves: this run recorded no losses")
	series := s.curves(r.ID, "")
	if c := s.compare.Selected; strings.HasPrefix(c, "Run ") {
		var id int64
		fmt.Sscan(strings.TrimPrefix(c, "Run "), &id)
		if id != r.ID {
			series = append(series, s.curves(id, fmt.Sprintf("run %d ", id))...)
		}
	}
	s.chart.SetSeries(series...)
}

// curves are a run's recorded losses, named with prefix.
func (s *runsScreen) curves(runID int64, prefix string) []Series {
	var out []Series
	for _, name := range []string{"train_loss", "val_loss"} {
		ms, err := s.u.ws.Store.Metrics(s.u.ctx, runID, name)
		if err != nil || len(ms) == 0 {
			continue
		}
		se := Series{Name: prefix + strings.ReplaceAll(name, "_", " ")}
		for _, m := range ms {
			se.X, se.Y = append(se.X, float64(m.Step)), append(se.Y, m.Value)
		}
		out = append(out, se)
	}
	return out
}

func (s *runsScreen) deleteRun() {
	if s.selected < 0 {
		return
	}
	r := s.runs[s.selected]
	dialog.ShowConfirm("Delete run?", fmt.Sprintf("Run %d and its metrics leave the history. Files it wrote (%s) stay on disk.", r.ID, r.Output), func(ok bool) {
		if !ok {
			return
		}
		if err := s.u.ws.Store.DeleteRun(s.u.ctx, r.ID); err != nil {
			s.u.showError("The run was not deleted", err)
			return
		}
		s.selected = -1
		s.list.UnselectAll()
		s.refresh()
	}, s.u.Win)
}

func (s *runsScreen) resumeRun() {
	if s.selected < 0 {
		return
	}
	r := s.runs[s.selected]
	job, err := s.u.ws.Resume(s.u.ctx, r.ID)
	if err != nil {
		s.u.showError("The run cannot resume", err)
		return
	}
	if r.Kind == "train" {
		s.u.train.follow(job, r.Model)
		s.u.show("Train")
		return
	}
	s.u.follow(job, func(app.Progress) {}, func(error) { s.refresh() })
	s.refresh()
}

// headline is a run's one-line result.
func headline(r app.RunRecord) string {
	if r.Status != "done" && r.Error != "" {
		msg := r.Error
		if len(msg) > 70 {
			msg = msg[:67] + "…"
		}
		return msg
	}
	var v map[string]any
	if json.Unmarshal(r.Result, &v) != nil {
		return ""
	}
	switch r.Kind {
	case "train":
		if l, ok := v["train_loss"].(float64); ok {
			return fmt.Sprintf("%v steps, loss %.3f", v["steps"], l)
		}
	case "quantize":
		b, _ := v["PerplexityBefore"].(float64)
		a, _ := v["PerplexityAfter"].(float64)
		return fmt.Sprintf("perplexity %.2f → %.2f", b, a)
	case "pull":
		n, _ := v["bytes"].(float64)
		return bytesText(int64(n))
	case "decide":
		qs, _ := v["questions"].(map[string]any)
		var parts []string
		for _, q := range slices.Sorted(maps.Keys(qs)) {
			if a, ok := qs[q].(map[string]any)["accuracy"].(float64); ok {
				parts = append(parts, fmt.Sprintf("%s %.0f%%", q, 100*a))
			}
		}
		return strings.Join(parts, ", ")
	case "tao":
		check, _ := v["check"].(map[string]any)
		before, _ := check["before"].(float64)
		after, _ := check["after"].(float64)
		if kept, _ := v["kept"].(bool); kept {
			return fmt.Sprintf("kept: reward %.2f → %.2f", before, after)
		}
		return "left the adapter as it was"
	}
	return ""
}

// runDetail is a run's parameters and final figures as readable lines.
func runDetail(r app.RunRecord) string {
	var b strings.Builder
	if !r.Started.IsZero() {
		end := r.Finished
		if end.IsZero() {
			end = time.Now()
		}
		fmt.Fprintf(&b, "Started %s, took %s.\n", r.Started.Local().Format("Mon Jan 2 15:04:05"), end.Sub(r.Started).Round(time.Second))
	}
	if r.Dataset != "" {
		fmt.Fprintf(&b, "Data: %s\n", r.Dataset)
	}
	if r.Output != "" {
		fmt.Fprintf(&b, "Output: %s\n", r.Output)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "Stopped: %s\n", app.UserMessage(fmt.Errorf("%s", r.Error)))
	}
	writeMap := func(title string, raw []byte) {
		var v map[string]any
		if json.Unmarshal(raw, &v) != nil || len(v) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s\n", title)
		writeValues(&b, v, "  ")
	}
	writeMap("Result", r.Result)
	writeMap("Settings", r.Params)
	return b.String()
}

// writeValues writes m's non-zero entries one per line, sorted, nested maps
// indented under their key, numbers in a readable precision.
func writeValues(b *strings.Builder, m map[string]any, indent string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !isZero(m[k]) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch x := m[k].(type) {
		case map[string]any:
			fmt.Fprintf(b, "%s%s:\n", indent, k)
			writeValues(b, x, indent+"  ")
		case float64:
			fmt.Fprintf(b, "%s%s: %s\n", indent, k, strconv.FormatFloat(x, 'g', 4, 64))
		case []any:
			fmt.Fprintf(b, "%s%s: %d values\n", indent, k, len(x))
		default:
			fmt.Fprintf(b, "%s%s: %v\n", indent, k, x)
		}
	}
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case float64:
		return x == 0
	case string:
		return x == ""
	case bool:
		return !x
	}
	return false
}
