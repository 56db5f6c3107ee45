package ui

import (
	"testing"
	"time"

	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"github.com/inloop/inloop/app"
)

// The tax table: a line per way of giving the examples, the zero-shot row
// once, and a prompt that does not fit said so instead of figures.
func TestTaxTable(t *testing.T) {
	rows := []app.TaxRow{
		{Shots: 0, InContext: app.TaxSide{Fits: true, PromptTokens: 60, KVBytes: 180 << 10, TTFT: 12 * time.Millisecond, DecodeTPS: 300, Accuracy: 0.3}},
		{Shots: 4, InContext: app.TaxSide{Fits: true, PromptTokens: 400, KVBytes: 1200 << 10, TTFT: 80 * time.Millisecond, DecodeTPS: 250, Accuracy: 0.35},
			Adapted: app.TaxSide{Fits: true, PromptTokens: 60, KVBytes: 180 << 10, TTFT: 12 * time.Millisecond, DecodeTPS: 300, Accuracy: 0.4, TrainDuration: 3 * time.Second}},
		{Shots: 64, InContext: app.TaxSide{Fits: false, PromptTokens: 6000}, Adapted: app.TaxSide{Fits: true, PromptTokens: 60, Accuracy: 0.5}},
	}
	tbl := container.NewGridWithColumns(7)
	fillTaxTable(tbl, rows)
	if n := len(tbl.Objects); n != 7*6 {
		t.Fatalf("%d cells, want a header and 5 lines of 7", n)
	}
	cell := func(line, col int) string { return tbl.Objects[7*line+col].(*widget.Label).Text }
	if cell(2, 1) != "in the prompt" || cell(2, 3) != "1.2 MiB" || cell(3, 1) != "learnt (3 s)" || cell(3, 6) != "40%" {
		t.Errorf("4 examples: %q %q %q %q", cell(2, 1), cell(2, 3), cell(3, 1), cell(3, 6))
	}
	if cell(4, 3) != "does not fit" || cell(4, 2) != "6000" {
		t.Errorf("64 examples in the prompt: %q, %q", cell(4, 2), cell(4, 3))
	}
}
