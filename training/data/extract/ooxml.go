package extract

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// docx reads a Word document: the body's paragraphs and headings, tables as
// rows of cells, footnote and endnote marks in the text and the notes
// themselves after it. Deleted tracked changes and field codes are left out.
func (x *extractor) docx(raw []byte) (Document, error) {
	z, err := x.openZip(raw)
	if err != nil {
		return Document{}, err
	}
	if z.has("word/encryption.xml") || z.has("EncryptedPackage") {
		return Document{}, fmt.Errorf("%w: a password-protected document", ErrEncrypted)
	}
	body := newWriter(x.out)
	marks := map[string]string{} // note id -> the number shown, in order of reference
	if err := x.wordPart(z, "word/document.xml", body, nil, marks); err != nil {
		return Document{}, err
	}
	doc := Document{Sections: []string{body.String()}}
	for _, part := range []string{"word/footnotes.xml", "word/endnotes.xml"} {
		if !z.has(part) {
			continue
		}
		notes := newWriter(x.out)
		if err := x.wordPart(z, part, notes, notes, marks); err != nil {
			return Document{}, err
		}
		if s := notes.String(); s != "" {
			doc.Sections[0] += "\n\n" + s
		}
	}
	return doc, nil
}

// wordPart walks one WordprocessingML part into w. notes, when set, is the
// writer of a footnotes part: each note starts a paragraph with its mark.
// marks numbers the notes in the order the text refers to them, as Word
// shows them (the ids in the file are internal).
func (x *extractor) wordPart(z *zipFile, name string, w, notes *writer, marks map[string]string) error {
	mark := func(kind, id string) string {
		key := kind[:1] + id
		if m, ok := marks[key]; ok {
			return m
		}
		n := 1
		for k := range marks {
			if k[0] == key[0] {
				n++
			}
		}
		if kind[0] == 'e' {
			marks[key] = "e" + strconv.Itoa(n)
		} else {
			marks[key] = strconv.Itoa(n)
		}
		return marks[key]
	}
	d, c, err := z.xml(name)
	if err != nil {
		return err
	}
	defer c.Close()
	inText := false
	for n := 0; ; n++ {
		if w.err != nil {
			return w.err
		}
		t, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		switch t := t.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "t":
				inText = true
			case "tab":
				w.sep(sepSpace)
			case "br", "cr":
				w.sep(sepLine)
			case "tbl":
				w.startTable()
			case "tr":
				w.startRow()
			case "tc":
				w.startCell()
			case "footnoteReference", "endnoteReference":
				w.put("[" + mark(t.Name.Local, attr(t, "id")) + "]")
			case "footnote", "endnote":
				switch attr(t, "type") {
				case "separator", "continuationSeparator", "continuationNotice":
					if err := d.Skip(); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					continue
				}
				if notes != nil {
					w.sep(sepPara)
					w.put("[" + mark(t.Name.Local, attr(t, "id")) + "]")
					w.sep(sepSpace)
				}
			case "del", "moveFrom", "instrText", "delInstrText":
				if err := d.Skip(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				w.sep(sepPara)
			case "tbl":
				w.endTable()
			case "tr":
				w.endRow()
			case "tc":
				w.endCell()
			}
		case xml.CharData:
			if inText {
				w.text(string(t))
			}
		}
	}
}

// pptx reads a presentation: each slide's text in the deck's order, then its
// speaker notes. Slide numbers, dates and footers are left out.
func (x *extractor) pptx(raw []byte) (Document, error) {
	z, err := x.openZip(raw)
	if err != nil {
		return Document{}, err
	}
	slides := x.slideOrder(z)
	if len(slides) > x.lim.MaxEntries {
		return Document{}, fmt.Errorf("%w: %d slides, over the limit of %d", ErrTooLarge, len(slides), x.lim.MaxEntries)
	}
	w := newWriter(x.out)
	for _, s := range slides {
		w.sep(sepPara)
		if err := x.drawingPart(z, s, w); err != nil {
			return Document{}, err
		}
		dir, file := path.Split(s)
		for _, r := range z.relationships(dir+"_rels/"+file+".rels", dir) {
			if strings.HasSuffix(r.Type, "/notesSlide") && z.has(r.Target) {
				notes := newWriter(x.out)
				if err := x.drawingPart(z, r.Target, notes); err != nil {
					return Document{}, err
				}
				if s := notes.String(); s != "" {
					w.sep(sepPara)
					w.put("Notes: " + s)
				}
			}
		}
	}
	return Document{Sections: []string{w.String()}, Pages: len(slides)}, w.err
}

// slideOrder lists the slide parts in the deck's order (presentation.xml's
// slide list), falling back to the slide files by number.
func (x *extractor) slideOrder(z *zipFile) []string {
	rels := z.relationships("ppt/_rels/presentation.xml.rels", "ppt")
	var out []string
	if d, c, err := z.xml("ppt/presentation.xml"); err == nil {
		defer c.Close()
		for {
			t, err := d.Token()
			if err != nil {
				break
			}
			if se, ok := t.(xml.StartElement); ok && se.Name.Local == "sldId" {
				if r, ok := rels[attr(se, "id")]; ok && z.has(r.Target) {
					out = append(out, r.Target)
				}
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, name := range z.byName {
		if strings.HasPrefix(name, "ppt/slides/slide") && strings.HasSuffix(name, ".xml") {
			out = append(out, name)
		}
	}
	return out
}

// placeholderSkipped are placeholders whose text is furniture, not content.
var placeholderSkipped = map[string]bool{"sldNum": true, "dt": true, "ftr": true, "hdr": true, "sldImg": true}

// drawingPart walks a DrawingML part (a slide or its notes) into w:
// paragraphs, line breaks, tables; shapes holding furniture placeholders are
// left out.
func (x *extractor) drawingPart(z *zipFile, name string, w *writer) error {
	d, c, err := z.xml(name)
	if err != nil {
		return err
	}
	defer c.Close()
	var shapes []bool // per open shape: is it left out
	skipped := func() bool {
		for _, s := range shapes {
			if s {
				return true
			}
		}
		return false
	}
	inText := false
	for {
		if w.err != nil {
			return w.err
		}
		t, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		switch t := t.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "sp":
				shapes = append(shapes, false)
			case "ph":
				if len(shapes) > 0 && placeholderSkipped[attr(t, "type")] {
					shapes[len(shapes)-1] = true
				}
			case "t":
				inText = true
			case "br":
				w.sep(sepLine)
			case "tbl":
				w.startTable()
			case "tr":
				w.startRow()
			case "tc":
				w.startCell()
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "sp":
				if len(shapes) > 0 {
					shapes = shapes[:len(shapes)-1]
				}
			case "t":
				inText = false
			case "p":
				w.sep(sepPara)
			case "tbl":
				w.endTable()
			case "tr":
				w.endRow()
			case "tc":
				w.endCell()
			}
		case xml.CharData:
			if inText && !skipped() {
				w.text(string(t))
			}
		}
	}
}
