package extract

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxRepeat caps how often a repeated spreadsheet cell is written out:
// OpenDocument compresses runs of equal cells, and a sheet's trailing empty
// columns are routinely "repeated 16384 times".
const maxRepeat = 256

// odf reads an OpenDocument file's content.xml: for text (ODT) and slides
// (ODP) the paragraphs, headings, tables as rows of cells, and footnotes
// after the text; for spreadsheets (ODS) each sheet's rows as "header:
// value" lines. Tracked deletions and comments are left out.
func (x *extractor) odf(raw []byte, format string) (Document, error) {
	z, err := x.openZip(raw)
	if err != nil {
		return Document{}, err
	}
	if z.has("META-INF/manifest.xml") {
		if m, err := z.read("META-INF/manifest.xml"); err == nil && containsFold(m, "encryption-data") {
			return Document{}, fmt.Errorf("%w: a password-protected document", ErrEncrypted)
		}
	}
	d, c, err := z.xml("content.xml")
	if err != nil {
		return Document{}, err
	}
	defer c.Close()
	if format == "ods" {
		return x.odsSheets(d)
	}
	body, notes := newWriter(x.out), newWriter(x.out)
	w := body
	citation, pages, notesPending := "", 0, false
	for {
		if w.err != nil {
			return Document{}, w.err
		}
		t, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("content.xml: %w", err)
		}
		switch t := t.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "tracked-changes", "annotation", "note-citation", "page-number", "page-count":
				if t.Name.Local == "note-citation" {
					citation = ""
					if s, err := charData(d); err == nil {
						citation = s
					}
					continue
				}
				if err := d.Skip(); err != nil {
					return Document{}, fmt.Errorf("content.xml: %w", err)
				}
			case "note-body":
				body.put("[" + citation + "]")
				w = notes
				w.sep(sepPara)
				w.put("[" + citation + "]")
				w.sep(sepSpace)
			case "s", "tab":
				w.sep(sepSpace)
			case "line-break":
				w.sep(sepLine)
			case "table":
				w.startTable()
			case "table-row":
				w.startRow()
			case "table-cell", "covered-table-cell":
				w.startCell()
			case "page":
				pages++
				w.sep(sepPara)
			case "notes":
				notesPending = true // written with the notes' first word
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "p", "h", "list-item":
				w.sep(sepPara)
			case "note-body":
				w = body
			case "notes":
				notesPending = false
			case "table":
				w.endTable()
			case "table-row":
				w.endRow()
			case "table-cell", "covered-table-cell":
				w.endCell()
			}
		case xml.CharData:
			if notesPending && len(bytes.TrimSpace(t)) > 0 {
				w.sep(sepPara)
				w.put("Notes:")
				w.sep(sepSpace)
				notesPending = false
			}
			w.text(string(t))
		}
	}
	text := body.String()
	if s := notes.String(); s != "" {
		text += "\n\n" + s
	}
	return Document{Sections: []string{text}, Pages: pages}, nil
}

// odsSheets reads an OpenDocument spreadsheet's tables row by row.
func (x *extractor) odsSheets(d *xml.Decoder) (Document, error) {
	var doc Document
	var sh *sheet
	var row []string
	var cell []byte
	inCell, repeat := false, 1
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := x.ctx.Err(); err != nil {
				return Document{}, err
			}
		}
		t, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("content.xml: %w", err)
		}
		switch t := t.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "table":
				doc.Pages++
				if doc.Pages > x.lim.MaxEntries {
					return Document{}, fmt.Errorf("%w: more than %d sheets", ErrTooLarge, x.lim.MaxEntries)
				}
				sh = x.newSheet(attr(t, "name"))
			case "table-row":
				row = row[:0]
			case "table-cell", "covered-table-cell":
				inCell, cell = true, cell[:0]
				repeat, _ = strconv.Atoi(attr(t, "number-columns-repeated"))
				repeat = min(max(repeat, 1), maxRepeat)
			case "p":
				if len(cell) > 0 {
					cell = append(cell, ' ')
				}
			case "annotation":
				if err := d.Skip(); err != nil {
					return Document{}, fmt.Errorf("content.xml: %w", err)
				}
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "table-cell", "covered-table-cell":
				inCell = false
				if len(row)+repeat > 16384 {
					return Document{}, fmt.Errorf("%w: a row of more than 16384 cells", ErrTooLarge)
				}
				for range repeat {
					row = append(row, string(cell))
				}
			case "table-row":
				if sh != nil {
					if err := sh.add(row); err != nil {
						return Document{}, err
					}
				}
			case "table":
				if sh != nil {
					doc.Sections = append(doc.Sections, sh.done()...)
					sh = nil
				}
			}
		case xml.CharData:
			if inCell {
				if len(cell) > maxCSVRecord {
					return Document{}, fmt.Errorf("%w: a cell of more than %d bytes", ErrTooLarge, maxCSVRecord)
				}
				cell = append(cell, t...)
			}
		}
	}
	return doc, nil
}

// charData reads the text of the element just opened, to its end.
func charData(d *xml.Decoder) (string, error) {
	var b []byte
	for depth := 1; depth > 0; {
		t, err := d.Token()
		if err != nil {
			return "", err
		}
		switch t := t.(type) {
		case xml.StartElement:
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if len(b) < 256 {
				b = append(b, t...)
			}
		}
	}
	return string(b), nil
}
