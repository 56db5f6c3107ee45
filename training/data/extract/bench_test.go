package extract

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"
)

// benchExtract reads raw repeatedly and reports MB/s (from SetBytes) and,
// for paged formats, pages/s.
func benchExtract(b *testing.B, name string, raw []byte) {
	b.Helper()
	doc, err := Extract(context.Background(), name, raw, Limits{})
	if err != nil && !Skipped(err) {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := Extract(context.Background(), name, raw, Limits{}); err != nil && !Skipped(err) {
			b.Fatal(err)
		}
	}
	if doc.Pages > 0 {
		b.ReportMetric(float64(doc.Pages)*float64(b.N)/time.Since(start).Seconds(), "pages/s")
	}
	b.ReportMetric(float64(doc.Chars())*float64(b.N)/time.Since(start).Seconds()/1e6, "Mchars/s")
}

// BenchmarkExtract: the real files in testdata (small: per-file overhead)
// and larger generated ones of each format (throughput). Set
// INLOOP_BENCH_FILES to a folder to add its files.
func BenchmarkExtract(b *testing.B) {
	files, _ := filepath.Glob("testdata/*.*")
	if dir := os.Getenv("INLOOP_BENCH_FILES"); dir != "" {
		more, _ := filepath.Glob(filepath.Join(dir, "*"))
		files = append(files, more...)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(f), func(b *testing.B) { benchExtract(b, f, raw) })
	}
	for name, raw := range largeFiles(b) {
		b.Run(name, func(b *testing.B) { benchExtract(b, name, raw) })
	}
}

// largeFiles are a few megabytes of each text-heavy format.
func largeFiles(b *testing.B) map[string][]byte {
	para := "The quarterly figures were reviewed by the board, and the northern region again led revenue growth. "
	out := map[string][]byte{"pdf-200-pages.pdf": pagesPDF(200)}

	var body strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&body, "<w:p><w:r><w:t>%d. %s%s</w:t></w:r></w:p>", i, para, para)
	}
	out["large.docx"] = zipOf(b, map[string]string{"word/document.xml": `<w:document xmlns:w="w"><w:body>` + body.String() + `</w:body></w:document>`})

	var page strings.Builder
	page.WriteString("<html><body>")
	for i := range 4000 {
		fmt.Fprintf(&page, "<p>%d. %s<b>%s</b></p><table><tr><td>a</td><td>%d</td></tr></table>", i, para, para, i)
	}
	out["large.html"] = []byte(page.String())

	var csv strings.Builder
	csv.WriteString("id,customer,region,amount,note\n")
	for i := range 40000 {
		fmt.Fprintf(&csv, "%d,customer %d,north,%d.50,\"paid, late\"\n", i, i%977, i%10000)
	}
	out["large.csv"] = []byte(csv.String())

	f := excelize.NewFile()
	sw, err := f.NewStreamWriter("Sheet1")
	if err != nil {
		b.Fatal(err)
	}
	sw.SetRow("A1", []any{"id", "customer", "region", "amount"})
	for i := range 20000 {
		cell, _ := excelize.CoordinatesToCellName(1, i+2)
		sw.SetRow(cell, []any{i, fmt.Sprintf("customer %d", i%977), "north", float64(i%10000) + 0.5})
	}
	sw.Flush()
	var xb bytes.Buffer
	f.WriteTo(&xb)
	out["large.xlsx"] = xb.Bytes()

	var mbox strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&mbox, "From a@example.com Mon Jan  1 00:00:00 2024\nFrom: a%d@example.com\nTo: team@example.com\nSubject: note %d\nDate: Mon, 01 Jan 2024 00:00:00 +0000\n\n%s\n%s\n\n", i, i, para, para)
	}
	out["large.mbox"] = []byte(mbox.String())
	return out
}
