// Package extract turns the files analysts keep — PDF, Word and OpenDocument
// text, spreadsheets, slides, mail, web pages, e-books and plain text of any
// extension — into the plain text a model trains on. Every file is untrusted
// input: each format reads under size, count, depth and time limits, and a
// file over one of them ends in an error naming the limit, never a hang, a
// crash or memory exhausted. A file that cannot be used says why with one of
// the sentinel errors (binary, encrypted, no text layer, too large,
// unsupported), so a caller can tell "skipped" from "failed".
package extract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Why a file is skipped. Any other error means its extraction failed.
var (
	ErrBinary      = errors.New("binary file")
	ErrEncrypted   = errors.New("encrypted")
	ErrNoText      = errors.New("no text")
	ErrTooLarge    = errors.New("too large")
	ErrUnsupported = errors.New("unsupported format")
)

// errCrashed marks a reader that panicked (a bug to fix; the fuzzers look for it).
var errCrashed = errors.New("crashed")

// Skipped reports whether err says a file is deliberately left out (a
// sentinel above) rather than broken.
func Skipped(err error) bool {
	for _, s := range []error{ErrBinary, ErrEncrypted, ErrNoText, ErrTooLarge, ErrUnsupported} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Limits bound the work one file may cause. Zero fields take the defaults.
type Limits struct {
	MaxFileBytes  int64         // a file larger than this is not read; 256 MiB
	MaxTextBytes  int64         // text one file may produce; 32 MiB
	MaxUnzipBytes int64         // bytes inflated from one zip container (DOCX, XLSX, EPUB, …); 256 MiB
	MaxEntries    int           // zip entries, mail parts, spreadsheet sheets, PDF pages; 20000
	MaxDepth      int           // nesting: mail parts in parts, attachments in attachments; 16
	Timeout       time.Duration // one file's extraction; 2 minutes
	RowsPerChunk  int           // table rows a training chunk holds at most; 50
}

// DefaultLimits are the limits Extract uses for zero fields.
var DefaultLimits = Limits{
	MaxFileBytes:  256 << 20,
	MaxTextBytes:  32 << 20,
	MaxUnzipBytes: 256 << 20,
	MaxEntries:    20000,
	MaxDepth:      16,
	Timeout:       2 * time.Minute,
	RowsPerChunk:  50,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	if l.MaxTextBytes > 0 {
		d.MaxTextBytes = l.MaxTextBytes
	}
	if l.MaxUnzipBytes > 0 {
		d.MaxUnzipBytes = l.MaxUnzipBytes
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	if l.Timeout > 0 {
		d.Timeout = l.Timeout
	}
	if l.RowsPerChunk > 0 {
		d.RowsPerChunk = l.RowsPerChunk
	}
	return d
}

// Document is a file's text.
type Document struct {
	Format string // pdf, docx, odt, xlsx, csv, tsv, pptx, eml, mbox, html, epub, text
	// Sections hold the text, paragraphs separated by blank lines. A training
	// chunk never spans two sections: a spreadsheet's rows come in sections
	// of at most RowsPerChunk rows, so no chunk mixes more.
	Sections []string
	Pages    int      // pages (PDF), slides (PPTX), sheets (XLSX), messages (MBOX), chapters (EPUB); 0 where none
	Notes    []string // what the reader should know, e.g. pages with no text layer
}

// Chars counts the document's characters (runes).
func (d Document) Chars() int {
	n := 0
	for _, s := range d.Sections {
		n += len([]rune(s))
	}
	return n
}

// Text is the whole document, sections separated by blank lines.
func (d Document) Text() string { return strings.Join(d.Sections, "\n\n") }

// Extract reads the file named name (for its extension) with content raw.
// The format comes from the content where it can (a PDF named .txt is read
// as a PDF), then from the extension; a file of unknown extension is read as
// text when it looks like text.
func Extract(ctx context.Context, name string, raw []byte, lim Limits) (doc Document, err error) {
	lim = lim.withDefaults()
	defer func() {
		// The readers are libraries fed hostile bytes: a panic in one is a
		// failed file, not a crashed program.
		if r := recover(); r != nil {
			doc, err = Document{}, fmt.Errorf("%w: the %s reader: %v", errCrashed, Format(name, raw), r)
		}
	}()
	if int64(len(raw)) > lim.MaxFileBytes {
		return Document{}, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrTooLarge, len(raw), lim.MaxFileBytes)
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	x := &extractor{ctx: ctx, lim: lim, out: &textBudget{left: lim.MaxTextBytes, limit: lim.MaxTextBytes}}
	doc, err = x.extract(name, raw, 0)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrTooLarge) {
			return Document{}, fmt.Errorf("%w: reading took longer than %v", ErrTooLarge, lim.Timeout)
		}
		return Document{}, err
	}
	doc.Sections = nonEmpty(doc.Sections)
	if len(doc.Sections) == 0 {
		if len(doc.Notes) > 0 {
			return doc, fmt.Errorf("%w: %s", ErrNoText, strings.Join(doc.Notes, "; "))
		}
		return doc, ErrNoText
	}
	return doc, nil
}

// extractor carries one file's limits and budget through nested formats
// (an attachment's text counts against its mail's budget).
type extractor struct {
	ctx context.Context
	lim Limits
	out *textBudget
}

// Format names the format Extract would read name/raw as, or "" when it would
// not read it (binary or unknown).
func Format(name string, raw []byte) string {
	f, _ := detect(name, raw)
	return f
}

func (x *extractor) extract(name string, raw []byte, depth int) (Document, error) {
	if depth > x.lim.MaxDepth {
		return Document{}, fmt.Errorf("%w: nested more than %d deep", ErrTooLarge, x.lim.MaxDepth)
	}
	if err := x.ctx.Err(); err != nil {
		return Document{}, err
	}
	format, why := detect(name, raw)
	var doc Document
	var err error
	switch format {
	case "pdf":
		doc, err = x.pdf(raw)
	case "docx":
		doc, err = x.docx(raw)
	case "pptx":
		doc, err = x.pptx(raw)
	case "xlsx":
		doc, err = x.xlsx(raw)
	case "odt", "odp", "ods":
		doc, err = x.odf(raw, format)
	case "epub":
		doc, err = x.epub(raw)
	case "csv", "tsv":
		doc, err = x.table(bytes.NewReader(raw), format)
	case "eml":
		doc, err = x.eml(raw, depth)
	case "mbox":
		doc, err = x.mbox(bytes.NewReader(raw), depth)
	case "html":
		var s string
		s, err = x.html(decodeText(raw))
		doc = Document{Sections: []string{s}}
	case "text":
		s := decodeText(raw)
		if err = x.out.take(len(s)); err == nil {
			doc = Document{Sections: []string{s}}
		}
	default:
		return Document{}, why
	}
	doc.Format = format
	return doc, err
}

// textBudget counts the text a file has produced against its limit.
type textBudget struct{ left, limit int64 }

func (b *textBudget) take(n int) error {
	b.left -= int64(n)
	if b.left < 0 {
		return fmt.Errorf("%w: more than %d bytes of text", ErrTooLarge, b.limit)
	}
	return nil
}

// ext is name's extension, lower case.
func ext(name string) string { return strings.ToLower(filepath.Ext(name)) }

func nonEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
