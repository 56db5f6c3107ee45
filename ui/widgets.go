package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/widget"
)

// submitEntry is a multi-line entry where Enter sends and Shift+Enter starts a new
// line, as in chat apps (Fyne's own multi-line entry does the opposite).
type submitEntry struct {
	widget.Entry
	onSubmit func()
	shift    bool
}

func newSubmitEntry(onSubmit func()) *submitEntry {
	e := &submitEntry{onSubmit: onSubmit}
	e.MultiLine = true
	e.Wrapping = fyne.TextWrapWord
	e.SetMinRowsVisible(2)
	e.ExtendBaseWidget(e)
	return e
}

func (e *submitEntry) KeyDown(k *fyne.KeyEvent) {
	if k.Name == "LeftShift" || k.Name == "RightShift" {
		e.shift = true
	}
	e.Entry.KeyDown(k)
}

func (e *submitEntry) KeyUp(k *fyne.KeyEvent) {
	if k.Name == "LeftShift" || k.Name == "RightShift" {
		e.shift = false
	}
	e.Entry.KeyUp(k)
}

func (e *submitEntry) TypedKey(k *fyne.KeyEvent) {
	if (k.Name == fyne.KeyReturn || k.Name == fyne.KeyEnter) && !e.shift {
		if e.onSubmit != nil {
			e.onSubmit()
		}
		return
	}
	e.Entry.TypedKey(k)
}
