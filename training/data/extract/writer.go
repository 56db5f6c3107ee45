package extract

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Break strengths a writer separates text with, weakest first.
const (
	sepNone = iota
	sepSpace
	sepLine
	sepPara
)

// writer assembles text from the pieces markup parsers find: runs of words,
// line and paragraph breaks, and table cells. Whitespace inside runs
// collapses to one space (except in preformatted text); a break is written
// only between two pieces of text, the strongest one asked for. Every byte
// counts against the file's text budget; past it, err is set and the rest
// is dropped, so a parser checks err in its loop.
type writer struct {
	b       strings.Builder
	pending int
	budget  *textBudget
	err     error

	// tables: rows become lines, cells are joined with " | ", and a
	// paragraph inside a cell is a space. Cells and rows close themselves
	// when the next one starts, as HTML lets them.
	tables []tableState // open tables, innermost last
}

type tableState struct {
	cells  int // cells started in the current row
	inCell bool
}

// inCell reports whether text goes into a table cell.
func (w *writer) inCell() bool {
	for _, t := range w.tables {
		if t.inCell {
			return true
		}
	}
	return false
}

func newWriter(budget *textBudget) *writer { return &writer{budget: budget} }

// text adds words; runs of whitespace become one space.
func (w *writer) text(s string) {
	if w.err != nil || s == "" {
		return
	}
	fields := strings.FieldsFunc(s, unicode.IsSpace)
	if r, _ := utf8.DecodeRuneInString(s); len(fields) == 0 || unicode.IsSpace(r) {
		w.sep(sepSpace)
	}
	for i, f := range fields {
		if i > 0 {
			w.sep(sepSpace)
		}
		w.put(f)
	}
	if r, _ := utf8.DecodeLastRuneInString(s); len(fields) > 0 && unicode.IsSpace(r) {
		w.sep(sepSpace)
	}
}

// pre adds text as it is: line breaks kept, spaces kept.
func (w *writer) pre(s string) {
	if w.err != nil || s == "" {
		return
	}
	w.put(s)
}

// sep asks for a break of at least strength k before the next text. Inside a
// table cell, lines and paragraphs are spaces.
func (w *writer) sep(k int) {
	if k > sepSpace && w.inCell() {
		k = sepSpace
	}
	w.pending = max(w.pending, k)
}

func (w *writer) put(s string) {
	if w.b.Len() > 0 {
		switch w.pending {
		case sepSpace:
			w.write(" ")
		case sepLine:
			w.write("\n")
		case sepPara:
			w.write("\n\n")
		}
	}
	w.pending = sepNone
	w.write(s)
}

func (w *writer) write(s string) {
	if w.err != nil {
		return
	}
	if err := w.budget.take(len(s)); err != nil {
		w.err = err
		return
	}
	w.b.WriteString(s)
}

func (w *writer) startTable() {
	w.sep(sepPara)
	w.tables = append(w.tables, tableState{})
}

func (w *writer) endTable() {
	if n := len(w.tables); n > 0 {
		w.tables = w.tables[:n-1]
	}
	w.sep(sepPara)
}

func (w *writer) startRow() {
	if n := len(w.tables); n > 0 {
		w.tables[n-1] = tableState{}
	}
	w.sep(sepLine)
}

func (w *writer) endRow() { w.startRow() }

func (w *writer) startCell() {
	n := len(w.tables)
	if n == 0 {
		return
	}
	t := &w.tables[n-1]
	t.inCell = false
	if t.cells > 0 {
		if !w.inCell() { // a nested table's cells are only spaced
			w.sep(sepSpace)
			w.put("|")
		}
		w.sep(sepSpace)
	}
	t.cells++
	t.inCell = true
}

func (w *writer) endCell() {
	if n := len(w.tables); n > 0 {
		w.tables[n-1].inCell = false
	}
}

// String is the text so far.
func (w *writer) String() string { return w.b.String() }
