package extract

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/klippa-app/go-pdfium"
	pdfiumerrors "github.com/klippa-app/go-pdfium/errors"
	"github.com/klippa-app/go-pdfium/requests"
	"github.com/klippa-app/go-pdfium/responses"
	"github.com/klippa-app/go-pdfium/webassembly"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// PDFs are read by PDFium, the engine of Chrome's PDF viewer, compiled to
// WebAssembly and run by wazero (pure Go): no system library, the same on
// macOS and Linux, and a sandbox around an engine fed untrusted files. A
// PDF's object loops, deep nesting or decompression bombs can only spend the
// instance's memory (capped at pdfMemoryPages) and time (the instance is
// killed when the file's time is up); a crash inside it is an error here.
const pdfMemoryPages = 16384 // 64 KiB pages: 1 GiB per instance

var pdfPool struct {
	once sync.Once
	pool pdfium.Pool
	err  error
}

// pdfInstances starts the PDFium pool once per process: compiling the module
// takes seconds, so the compiled code is cached in the user's cache folder
// and later starts take a fraction of a second.
func pdfInstances() (pdfium.Pool, error) {
	pdfPool.once.Do(func() {
		rc := wazero.NewRuntimeConfig().
			WithCoreFeatures(api.CoreFeaturesV2 | experimental.CoreFeaturesExceptionHandling).
			WithCloseOnContextDone(true).
			WithMemoryLimitPages(pdfMemoryPages)
		if dir, err := os.UserCacheDir(); err == nil {
			if cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "inloop", "pdfium")); err == nil {
				rc = rc.WithCompilationCache(cache)
			}
		}
		n := runtime.GOMAXPROCS(0)
		pdfPool.pool, pdfPool.err = webassembly.Init(webassembly.Config{
			MinIdle: 0, MaxIdle: n, MaxTotal: n,
			RuntimeConfig: rc,
			FSConfig:      wazero.NewFSConfig(), // no file system: the bytes are handed over
			ReuseWorkers:  true,
		})
		if pdfPool.err != nil {
			pdfPool.err = fmt.Errorf("starting the PDF reader: %w", pdfPool.err)
		}
	})
	return pdfPool.pool, pdfPool.err
}

// pdf reads a PDF's text layer page by page, in PDFium's reading order, a
// page break becoming a paragraph break. Pages with no text (scans) are
// named in a note; a PDF with none at all is ErrNoText.
func (x *extractor) pdf(raw []byte) (doc Document, err error) {
	pool, err := pdfInstances()
	if err != nil {
		return Document{}, err
	}
	inst, err := pool.GetInstanceWithContext(x.ctx)
	if err != nil {
		return Document{}, err
	}
	// When the file's time is up, kill the instance: a call inside it returns.
	stop := context.AfterFunc(x.ctx, func() { inst.Kill() })
	defer func() {
		if stop() {
			inst.Close()
		}
		if r := recover(); r != nil { // go-pdfium panics on some killed calls
			err = fmt.Errorf("PDF reader: %v", r)
		}
	}()
	opened, err := inst.OpenDocument(&requests.OpenDocument{File: &raw})
	if err != nil {
		switch {
		case errors.Is(err, pdfiumerrors.ErrPassword), errors.Is(err, pdfiumerrors.ErrSecurity):
			return Document{}, fmt.Errorf("%w: the PDF needs a password", ErrEncrypted)
		case errors.Is(err, pdfiumerrors.ErrFormat), errors.Is(err, pdfiumerrors.ErrFile):
			return Document{}, fmt.Errorf("damaged PDF: %w", err)
		}
		return Document{}, fmt.Errorf("PDF: %w", err)
	}
	defer inst.FPDF_CloseDocument(&requests.FPDF_CloseDocument{Document: opened.Document})
	count, err := inst.FPDF_GetPageCount(&requests.FPDF_GetPageCount{Document: opened.Document})
	if err != nil {
		return Document{}, fmt.Errorf("PDF: %w", err)
	}
	if count.PageCount > x.lim.MaxEntries {
		return Document{}, fmt.Errorf("%w: %d pages, over the limit of %d", ErrTooLarge, count.PageCount, x.lim.MaxEntries)
	}
	var pages []string
	var blank []int
	for i := range count.PageCount {
		if err := x.ctx.Err(); err != nil {
			return Document{}, err
		}
		text, err := pdfPageText(inst, opened, i)
		if err != nil {
			return Document{}, fmt.Errorf("PDF page %d: %w", i+1, err)
		}
		text = cleanPDFText(text)
		if err := x.out.take(len(text)); err != nil {
			return Document{}, err
		}
		if strings.TrimSpace(text) == "" {
			blank = append(blank, i+1)
			continue
		}
		pages = append(pages, text)
	}
	doc = Document{Sections: []string{strings.Join(pages, "\n\n")}, Pages: count.PageCount}
	switch {
	case count.PageCount == 0:
		doc.Notes = append(doc.Notes, "the PDF has no pages")
	case len(blank) == count.PageCount:
		doc.Notes = append(doc.Notes, fmt.Sprintf("no text layer on any of its %d pages (a scan? run OCR on it first)", count.PageCount))
	case len(blank) > 0:
		doc.Notes = append(doc.Notes, fmt.Sprintf("no text layer on %s %s (scanned?)", plural(len(blank), "page", "pages"), pageList(blank)))
	}
	return doc, nil
}

func pdfPageText(inst pdfium.Pdfium, d *responses.OpenDocument, i int) (string, error) {
	page, err := inst.FPDF_LoadPage(&requests.FPDF_LoadPage{Document: d.Document, Index: i})
	if err != nil {
		return "", err
	}
	defer inst.FPDF_ClosePage(&requests.FPDF_ClosePage{Page: page.Page})
	tp, err := inst.FPDFText_LoadPage(&requests.FPDFText_LoadPage{Page: requests.Page{ByReference: &page.Page}})
	if err != nil {
		return "", err
	}
	defer inst.FPDFText_ClosePage(&requests.FPDFText_ClosePage{TextPage: tp.TextPage})
	n, err := inst.FPDFText_CountChars(&requests.FPDFText_CountChars{TextPage: tp.TextPage})
	if err != nil || n.Count <= 0 {
		return "", err
	}
	t, err := inst.FPDFText_GetText(&requests.FPDFText_GetText{TextPage: tp.TextPage, StartIndex: 0, Count: n.Count})
	if err != nil {
		return "", err
	}
	return t.Text, nil
}

// cleanPDFText makes PDFium's page text plain: CRLF line ends to LF, its
// marks for hyphens it added at line ends and other control characters out.
func cleanPDFText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, " \n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case r < 0x20 || r == 0xfffe || r == 0xffff:
			return -1
		}
		return r
	}, s)
}

// pageList writes page numbers compactly: "3, 5–9, 12", at most ten items.
func pageList(pages []int) string {
	var parts []string
	for i := 0; i < len(pages); {
		j := i
		for j+1 < len(pages) && pages[j+1] == pages[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(pages[i])+"–"+strconv.Itoa(pages[j]))
		} else {
			parts = append(parts, strconv.Itoa(pages[i]))
		}
		i = j + 1
	}
	if len(parts) > 10 {
		return strings.Join(parts[:10], ", ") + fmt.Sprintf(" and %d more", len(parts)-10)
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
