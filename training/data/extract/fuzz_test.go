package extract

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLimits keep each fuzz input cheap; the properties hold at any limits.
var fuzzLimits = Limits{MaxTextBytes: 1 << 20, MaxUnzipBytes: 4 << 20, MaxEntries: 500, Timeout: 10 * time.Second}

// fuzzFormat seeds a fuzzer with the real files of a format (and the
// hostile ones the tests build) and checks what every reader promises: no
// panic escapes (Extract turns one into an error, which the fuzzer reports
// as a crash here), the text stays within its budget, and a document
// without error has text.
func fuzzFormat(f *testing.F, name string, seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := Extract(context.Background(), name, raw, fuzzLimits)
		if err != nil {
			if errors.Is(err, errCrashed) {
				t.Fatalf("reader panicked: %v", err)
			}
			return
		}
		if doc.Chars() == 0 {
			t.Fatalf("no error and no text")
		}
		if n := len(doc.Text()); int64(n) > fuzzLimits.MaxTextBytes+int64(2*len(doc.Sections)) {
			t.Fatalf("%d bytes of text over a %d-byte budget", n, fuzzLimits.MaxTextBytes)
		}
	})
}

func seedFiles(f *testing.F, pattern string) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	var out [][]byte
	for _, p := range files {
		out = append(out, read(f, filepath.Base(p)))
	}
	return out
}

func FuzzPDF(f *testing.F) {
	fuzzFormat(f, "f.pdf", append(seedFiles(f, "*.pdf"), loopPDF(), pagesPDF(2))...)
}

func FuzzDOCX(f *testing.F) {
	fuzzFormat(f, "f.docx", append(seedFiles(f, "*.docx"), bombDOCX(f, 1<<20, false))...)
}

func FuzzXLSX(f *testing.F) { fuzzFormat(f, "f.xlsx", seedFiles(f, "*.xlsx")...) }

func FuzzPPTX(f *testing.F) { fuzzFormat(f, "f.pptx", seedFiles(f, "*.pptx")...) }

func FuzzODF(f *testing.F) {
	fuzzFormat(f, "f.odt", append(seedFiles(f, "*.odt"), append(seedFiles(f, "*.ods"), seedFiles(f, "*.odp")...)...)...)
}

func FuzzEPUB(f *testing.F) { fuzzFormat(f, "f.epub", seedFiles(f, "*.epub")...) }

func FuzzMail(f *testing.F) {
	fuzzFormat(f, "f.eml", append(seedFiles(f, "*.eml"), append(seedFiles(f, "*.mbox"), nestedMail(30), siblingMail(20))...)...)
}

func FuzzMbox(f *testing.F) { fuzzFormat(f, "f.mbox", seedFiles(f, "*.mbox")...) }

func FuzzHTML(f *testing.F) {
	fuzzFormat(f, "f.html", append(seedFiles(f, "*.html"), []byte("<table><tr><td>a<table><td>b</table><td>c</tr></table><pre>x</pre>"))...)
}

func FuzzCSV(f *testing.F) {
	fuzzFormat(f, "f.csv", append(seedFiles(f, "*.csv"), []byte("a;b\n\"x;\"\"y\";z\n"), []byte("a\tb\n1\t2"))...)
}

// FuzzSniff: any bytes under any name: detection, decoding and whichever
// reader the content picks never panic.
func FuzzSniff(f *testing.F) {
	for _, s := range seedFiles(f, "*") {
		f.Add("file", s)
	}
	f.Add("LICENSE", []byte("From me\nFrom: x\nSubject: y\n\nbody"))
	f.Add("a.tsv", []byte("\xff\xfeh\x00"))
	f.Fuzz(func(t *testing.T, name string, raw []byte) {
		Format(name, raw)
		if _, err := Extract(context.Background(), name, raw, fuzzLimits); errors.Is(err, errCrashed) {
			t.Fatalf("reader panicked: %v", err)
		}
	})
}
