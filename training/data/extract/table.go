package extract

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// sheet turns a table's rows into training text: the first row with any
// value is the header, and every later row is a line of "header: value"
// pairs (empty cells left out), so each line reads on its own wherever a
// chunk cuts. Rows come in sections of at most RowsPerChunk rows, each
// opened by a line naming the sheet (when it has a name) and the rows.
type sheet struct {
	x        *extractor
	name     string
	header   []string
	row      int // rows seen, header included (1-based numbers as a spreadsheet shows them)
	first    int // row number of the first row in lines
	lines    []string
	sections []string
}

func (x *extractor) newSheet(name string) *sheet { return &sheet{x: x, name: name} }

// add takes the next row's cells.
func (s *sheet) add(cells []string) error {
	s.row++
	if s.header == nil {
		if allEmpty(cells) {
			return nil
		}
		s.header = make([]string, len(cells))
		for i, c := range cells {
			s.header[i] = cellText(c)
		}
		return nil
	}
	var b strings.Builder
	for i, c := range cells {
		c = cellText(c)
		if c == "" {
			continue
		}
		h := ""
		if i < len(s.header) {
			h = s.header[i]
		}
		if h == "" {
			h = "column " + strconv.Itoa(i+1)
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h + ": " + c)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := s.x.out.take(b.Len() + 1); err != nil {
		return err
	}
	if len(s.lines) == 0 {
		s.first = s.row
	}
	s.lines = append(s.lines, b.String())
	if len(s.lines) >= s.x.lim.RowsPerChunk {
		s.flush()
	}
	return nil
}

// flush closes the current section.
func (s *sheet) flush() {
	if len(s.lines) == 0 {
		return
	}
	head := fmt.Sprintf("Rows %d–%d", s.first, s.row)
	if s.name != "" {
		head = fmt.Sprintf("Sheet %s, rows %d–%d", s.name, s.first, s.row)
	}
	s.sections = append(s.sections, head+"\n"+strings.Join(s.lines, "\n"))
	s.lines = s.lines[:0]
}

// done returns the sheet's sections.
func (s *sheet) done() []string {
	s.flush()
	return s.sections
}

func allEmpty(cells []string) bool {
	for _, c := range cells {
		if strings.TrimSpace(c) != "" {
			return false
		}
	}
	return true
}

// cellText puts a cell on one line.
func cellText(c string) string { return strings.Join(strings.Fields(c), " ") }

// maxCSVRecord bounds one CSV record, so an unclosed quote in a huge file
// cannot pull the whole rest of the file into one field.
const maxCSVRecord = 1 << 20

// table reads CSV or TSV from r, streaming: the text budget, the time limit
// and a cap on one record's size stop a file of any length.
func (x *extractor) table(r io.Reader, format string) (Document, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	comma := '\t'
	if format == "csv" {
		peek, _ := br.Peek(8 << 10)
		comma = sniffComma(peek)
	}
	rr := &recordLimiter{r: br}
	cr := csv.NewReader(rr)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	sh := x.newSheet("")
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := x.ctx.Err(); err != nil {
				return Document{}, err
			}
		}
		rr.since = 0
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errRecordTooLarge) {
			return Document{}, fmt.Errorf("%w: row %d is more than %d bytes (an unclosed quote?)", ErrTooLarge, n+1, maxCSVRecord)
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
			err = nil
		}
		if err != nil {
			return Document{}, fmt.Errorf("row %d: %w", n+1, err)
		}
		if err := sh.add(rec); err != nil {
			return Document{}, err
		}
	}
	return Document{Sections: sh.done()}, nil
}

// sniffComma picks the separator of a CSV file from its first line: comma,
// semicolon (spreadsheets in locales with a decimal comma) or tab.
func sniffComma(head []byte) rune {
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	best, bestN := ',', 0
	for _, c := range []rune{',', ';', '\t', '|'} {
		if n := bytes.Count(head, []byte(string(c))); n > bestN {
			best, bestN = c, n
		}
	}
	return best
}

var errRecordTooLarge = errors.New("record too large")

// recordLimiter fails a read once one record has taken more than
// maxCSVRecord bytes; the caller resets since before each record.
type recordLimiter struct {
	r     io.Reader
	since int
}

func (l *recordLimiter) Read(p []byte) (int, error) {
	if l.since > maxCSVRecord {
		return 0, errRecordTooLarge
	}
	n, err := l.r.Read(p[:min(len(p), maxCSVRecord+1-l.since)])
	l.since += n
	return n, err
}
