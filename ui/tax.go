package ui

import (
	"context"
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// The KV-cache tax, measured from the Chat screen: N worked examples of the
// sample ticket task in the prompt against the same N learnt by an adapter,
// for the chat's model — what each costs in prompt tokens, KV cache, time to
// the first token and decode speed, and how accurate each is.

// showTax measures the tax for model in the background, in a dialog that
// shows the progress and then the table; closing the dialog stops it.
func (c *chatScreen) showTax(model string) {
	ctx, stop := context.WithCancel(c.u.ctx)
	status := widget.NewLabel("Measuring on the sample support tickets: 0, 4, 16 and 64 examples in the prompt, then the same examples learnt…")
	status.Wrapping = fyne.TextWrapWord
	table := container.NewGridWithColumns(7)
	body := container.NewBorder(status, nil, nil, nil, container.NewVScroll(table))
	d := dialog.NewCustom("KV-cache tax of "+model, "Close", body, c.u.Win)
	d.SetOnClosed(stop)
	d.Resize(fyne.NewSize(900, 420))
	d.Show()
	go func() {
		rows, err := c.u.ws.TaxReport(ctx, app.TaxSpec{Model: model}, func(msg string) {
			c.u.do(func() { status.SetText(capitalize(msg) + "…") })
		})
		c.u.do(func() {
			if err != nil {
				status.SetText(capitalize(app.UserMessage(err)) + ".")
				return
			}
			status.SetText("The same knowledge, two ways. In the prompt it is paid for on every turn; learnt, it costs nothing at answer time.")
			fillTaxTable(table, rows)
		})
	}()
}

// fillTaxTable lays the rows out: one line per way of giving the examples.
func fillTaxTable(t *fyne.Container, rows []app.TaxRow) {
	t.RemoveAll()
	for _, h := range []string{"Examples", "Given as", "Prompt tokens", "KV cache", "First token", "Decode", "Accuracy"} {
		t.Add(widget.NewLabelWithStyle(h, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
	}
	side := func(n int, how string, s app.TaxSide) {
		t.Add(widget.NewLabel(fmt.Sprint(n)))
		t.Add(widget.NewLabel(how))
		if !s.Fits {
			t.Add(widget.NewLabel(fmt.Sprintf("%d", s.PromptTokens)))
			for _, v := range []string{"does not fit", "—", "—", "—"} {
				t.Add(widget.NewLabel(v))
			}
			return
		}
		t.Add(widget.NewLabel(fmt.Sprintf("%d", s.PromptTokens)))
		t.Add(widget.NewLabel(bytesText(s.KVBytes)))
		t.Add(widget.NewLabel(fmt.Sprintf("%d ms", s.TTFT.Milliseconds())))
		t.Add(widget.NewLabel(fmt.Sprintf("%.1f tok/s", s.DecodeTPS)))
		t.Add(widget.NewLabel(fmt.Sprintf("%.0f%%", 100*s.Accuracy)))
	}
	for _, r := range rows {
		side(r.Shots, "in the prompt", r.InContext)
		if r.Shots > 0 {
			side(r.Shots, fmt.Sprintf("learnt (%.0f s)", r.Adapted.TrainDuration.Seconds()), r.Adapted)
		}
	}
}
