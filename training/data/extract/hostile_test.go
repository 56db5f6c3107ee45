package extract

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Every hostile file ends in a bounded, reported verdict: an error that says
// what limit it hit, never a hang, a crash or memory exhausted.

func zipOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bombDOCX is a DOCX whose document.xml inflates to n bytes: a paragraph
// opened and then n bytes of spaces (they deflate about 1000:1).
func bombDOCX(t testing.TB, n int64, lie bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.Create("[Content_Types].xml")
	body := io.MultiReader(strings.NewReader(`<w:document xmlns:w="w"><w:body><w:p><w:r><w:t>`), io.LimitReader(spaces{}, n))
	if lie { // a header claiming 1 KiB, so only the inflated bytes can tell
		var comp bytes.Buffer
		fw, _ := flate.NewWriter(&comp, flate.BestSpeed)
		io.Copy(fw, body)
		fw.Close()
		w, err := zw.CreateRaw(&zip.FileHeader{Name: "word/document.xml", Method: zip.Deflate, CompressedSize64: uint64(comp.Len()), UncompressedSize64: 1024})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(comp.Bytes())
	} else {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "word/document.xml", Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(w, body)
	}
	zw.Close()
	return buf.Bytes()
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// heapGrowth runs f and reports how much the heap grew at its peak, roughly
// (sampled before and after; the limits keep it far below the bomb's size).
func heapAfter(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestZipBombInDOCX(t *testing.T) {
	const inflated = 64 << 20
	lim := Limits{MaxUnzipBytes: 8 << 20}
	for _, lie := range []bool{false, true} {
		raw := bombDOCX(t, inflated, lie)
		var err error
		alloc := heapAfter(func() { _, err = Extract(context.Background(), "bomb.docx", raw, lim) })
		if lie {
			// archive/zip stops at the declared size, so the lie is a damaged file.
			if err == nil || Skipped(err) && !errors.Is(err, ErrTooLarge) {
				t.Errorf("lying header (%d-byte file): %v", len(raw), err)
			}
		} else if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "inflate to more than") {
			t.Errorf("%d-byte file inflating to %d: %v, want too large", len(raw), inflated, err)
		}
		if alloc > 32<<20 {
			t.Errorf("lie=%v: %d MB allocated for a %d MB bomb", lie, alloc>>20, inflated>>20)
		}
		t.Logf("lie=%v: %d-byte file: %v (%d kB allocated)", lie, len(raw), err, alloc>>10)
	}
}

func TestZipBombInXLSX(t *testing.T) {
	raw := zipOf(t, map[string]string{"xl/workbook.xml": "<workbook/>", "xl/worksheets/sheet1.xml": strings.Repeat(" ", 9<<20)})
	_, err := Extract(context.Background(), "bomb.xlsx", raw, Limits{MaxUnzipBytes: 8 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want too large", err)
	}
}

func TestZipWithTooManyEntries(t *testing.T) {
	files := map[string]string{"word/document.xml": "<w:document/>"}
	for i := range 300 {
		files[fmt.Sprintf("x/%d", i)] = ""
	}
	_, err := Extract(context.Background(), "many.docx", zipOf(t, files), Limits{MaxEntries: 100})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want too large", err)
	}
}

// loopPDF is a PDF whose page tree points back at itself, and whose page's
// content refers to an object that refers to itself.
func loopPDF() []byte {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R 3 0 R 2 0 R] /Count 3 /Parent 2 0 R >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources 5 0 R >>",
		"<< /Length 4 0 R /Filter 4 0 R >>\nstream\nBT /F1 12 Tf 72 720 Td (loop) Tj ET\nendstream",
		"<< /Font << /F1 5 0 R >> /XObject 5 0 R /Parent 5 0 R >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offs := make([]int, len(objs))
	for i, o := range objs {
		offs[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref, xref)
	return b.Bytes()
}

func TestPDFObjectLoop(t *testing.T) {
	start := time.Now()
	doc, err := Extract(context.Background(), "loop.pdf", loopPDF(), Limits{Timeout: 20 * time.Second})
	t.Logf("after %v: %d pages, %v", time.Since(start), doc.Pages, err)
	if err == nil {
		t.Fatalf("a PDF made of loops read as %q", doc.Text())
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

// pagesPDF is a valid PDF of n pages of text, for reads that take a while.
func pagesPDF(n int) []byte {
	var b bytes.Buffer
	var offs []int
	obj := func(s string) {
		offs = append(offs, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offs), s)
	}
	b.WriteString("%PDF-1.4\n")
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	kids := make([]string, n)
	for i := range n {
		kids[i] = fmt.Sprintf("%d 0 R", 4+2*i)
	}
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), n))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	for i := range n {
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font << /F1 3 0 R >> >> >>", 5+2*i))
		var c strings.Builder
		c.WriteString("BT /F1 11 Tf 14 TL 72 740 Td\n")
		for l := range 45 {
			fmt.Fprintf(&c, "(Page %d, line %d: the quarterly figures were reviewed by the board.) '\n", i+1, l+1)
		}
		c.WriteString("ET")
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", c.Len(), c.String()))
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offs)+1, xref)
	return b.Bytes()
}

func TestPDFTimeLimitKills(t *testing.T) {
	raw := pagesPDF(2000)
	start := time.Now()
	_, err := Extract(context.Background(), "long.pdf", raw, Limits{Timeout: 300 * time.Millisecond})
	t.Logf("stopped after %v: %v", time.Since(start), err)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "took longer") {
		t.Errorf("got %v, want the time limit", err)
	}
	// The pool still serves the next file.
	if doc, err := Extract(context.Background(), "short.pdf", pagesPDF(2), Limits{}); err != nil || !strings.Contains(doc.Text(), "Page 2, line 45: the quarterly") {
		t.Errorf("after a killed read: %v", err)
	}
}

// csvStream is an endless CSV: a header, then numbered rows.
type csvStream struct {
	row int
	buf []byte
}

func (s *csvStream) Read(p []byte) (int, error) {
	if len(s.buf) == 0 {
		if s.row == 0 {
			s.buf = []byte("id,name,amount\n")
		} else {
			s.buf = fmt.Appendf(s.buf, "%d,customer %d,%d.50\n", s.row, s.row%977, s.row%10000)
		}
		s.row++
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// A 10 GB CSV, streamed: the text budget ends it after a few megabytes.
func TestHugeCSV(t *testing.T) {
	lim := Limits{MaxTextBytes: 4 << 20}.withDefaults()
	x := &extractor{ctx: context.Background(), lim: lim, out: &textBudget{left: lim.MaxTextBytes, limit: lim.MaxTextBytes}}
	src := &csvStream{}
	r := io.LimitReader(src, 10<<30)
	_, err := x.table(r, "csv")
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want too large", err)
	}
	if src.row > 200000 {
		t.Errorf("read %d rows for a 4 MB text budget", src.row)
	}
	// One unclosed quote: a record cap, not the whole stream in one field.
	x.out = &textBudget{left: lim.MaxTextBytes, limit: lim.MaxTextBytes}
	_, err = x.table(io.MultiReader(strings.NewReader("a,b\n\"open,"), io.LimitReader(spaces{}, 10<<30)), "csv")
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "unclosed quote") {
		t.Errorf("unclosed quote: %v", err)
	}
	// And the time limit stops a stream too.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	x.ctx, x.out = ctx, &textBudget{left: 1 << 40, limit: 1 << 40}
	start := time.Now()
	if _, err := x.table(io.LimitReader(&csvStream{}, 10<<30), "csv"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("time limit: %v after %v", err, time.Since(start))
	}
}

// nestedMail is a message whose body is a multipart holding a multipart,
// depth times over.
func nestedMail(depth int) []byte {
	var b bytes.Buffer
	b.WriteString("From: a@example.com\r\nSubject: deep\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b0\"\r\n\r\n")
	for i := range depth {
		fmt.Fprintf(&b, "--b%d\r\nContent-Type: multipart/mixed; boundary=\"b%d\"\r\n\r\n", i, i+1)
	}
	fmt.Fprintf(&b, "--b%d\r\nContent-Type: text/plain\r\n\r\nthe innermost words\r\n", depth)
	for i := depth; i >= 0; i-- {
		fmt.Fprintf(&b, "--b%d--\r\n", i)
	}
	return b.Bytes()
}

func siblingMail(parts int) []byte {
	var b bytes.Buffer
	b.WriteString("From: a@example.com\r\nSubject: wide\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"sep\"\r\n\r\n")
	for i := range parts {
		fmt.Fprintf(&b, "--sep\r\nContent-Type: text/plain\r\n\r\npart %d\r\n", i)
	}
	b.WriteString("--sep--\r\n")
	return b.Bytes()
}

func TestMailWithManyParts(t *testing.T) {
	start := time.Now()
	_, err := Extract(context.Background(), "deep.eml", nestedMail(10000), Limits{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("10,000 nested parts: %v", err)
	}
	doc, err := Extract(context.Background(), "ok.eml", nestedMail(5), Limits{})
	if err != nil || !strings.Contains(doc.Text(), "the innermost words") {
		t.Errorf("5 nested parts: %q, %v", doc.Text(), err)
	}
	_, err = Extract(context.Background(), "wide.eml", siblingMail(10000), Limits{MaxEntries: 1000})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "MIME parts") {
		t.Errorf("10,000 parts over a limit of 1000: %v", err)
	}
	doc, err = Extract(context.Background(), "wide.eml", siblingMail(10000), Limits{})
	if err != nil || !strings.Contains(doc.Text(), "part 9999") {
		t.Errorf("10,000 parts under the default limit: %v", err)
	}
	t.Logf("all four in %v", time.Since(start))
}

// A mail attaching itself, as deep as it likes: the depth limit holds.
func TestMailAttachmentRecursion(t *testing.T) {
	msg := []byte("From: a@example.com\r\nSubject: leaf\r\n\r\nleaf text\r\n")
	for i := range 40 {
		var b bytes.Buffer
		fmt.Fprintf(&b, "From: a@example.com\r\nSubject: wrap\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"z%d\"\r\n\r\n--z%d\r\nContent-Type: text/plain\r\n\r\nwrapper\r\n", i, i)
		fmt.Fprintf(&b, "--z%d\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"inner.eml\"\r\n\r\n", i)
		b.Write(msg)
		fmt.Fprintf(&b, "\r\n--z%d--\r\n", i)
		msg = b.Bytes()
	}
	// The outer messages are read; the attachment past the depth limit is
	// left out with a note saying so.
	doc, err := Extract(context.Background(), "russian-doll.eml", msg, Limits{})
	if err != nil || !strings.Contains(doc.Text(), "wrapper") || strings.Contains(doc.Text(), "leaf text") {
		t.Fatalf("got %v, %q, notes %q", err, doc.Text(), doc.Notes)
	}
	if n := strings.Join(doc.Notes, "; "); !strings.Contains(n, "inner.eml left out: too large: MIME parts nested more than 16 deep") {
		t.Errorf("notes %q", n)
	}
}

func TestHTMLEndlessToken(t *testing.T) {
	page := "<p title=\"" + strings.Repeat("a", maxHTMLToken+10)
	_, err := Extract(context.Background(), "p.html", []byte(page), Limits{})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want too large", err)
	}
}

func TestFileSizeLimit(t *testing.T) {
	_, err := Extract(context.Background(), "a.txt", make([]byte, 2048), Limits{MaxFileBytes: 1024})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want too large", err)
	}
}
