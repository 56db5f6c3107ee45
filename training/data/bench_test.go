package data

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func BenchmarkBatcherNext(b *testing.B) {
	exs := randomExamples(1024)
	bt, err := NewBatcher(exs, BatchOptions{BatchSize: 8, MaxSeqLen: 512, Shuffle: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		bt.Next()
	}
}

func BenchmarkChunkDocument(b *testing.B) {
	text := strings.Repeat("A sentence of some length, like this one. Another follows it!\n\nA new paragraph.\n", 2000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := chunkDocument(&byteTokenizer{}, "d.md", text, ChunkOptions{Size: 512, Overlap: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIngestFolder reads a folder of 500 mixed documents — the real
// files of extract/testdata in turn, with a 50-page PDF every 25th file —
// as a Scan does, on all cores, and reports files/s and MB/s. The progress
// lines (with their ETA) are what `inloop data` prints; the first run logs a
// few.
func BenchmarkIngestFolder(b *testing.B) {
	src, _ := filepath.Glob(filepath.Join("extract", "testdata", "*.*"))
	if len(src) == 0 {
		b.Skip("no extract/testdata")
	}
	root := b.TempDir()
	var total int64
	for i := range 500 {
		name := src[i%len(src)]
		raw, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		base := fmt.Sprintf("%03d-%s", i, filepath.Base(name))
		if i%25 == 0 {
			raw, base = longPDF, fmt.Sprintf("%03d-long.pdf", i)
		}
		dir := filepath.Join(root, fmt.Sprintf("folder%d", i%10))
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, base), raw, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(raw))
	}
	b.SetBytes(total)
	logged := false
	for b.Loop() {
		c, err := NewCorpus(root, &byteTokenizer{}, ChunkOptions{Size: 512, Overlap: 64})
		if err != nil {
			b.Fatal(err)
		}
		var lines []string
		if _, err := c.ScanContext(context.Background(), func(p ScanProgress) {
			if p.Done%100 == 0 || p.Done == p.Total {
				lines = append(lines, p.String())
			}
		}); err != nil {
			b.Fatal(err)
		}
		if !logged {
			b.Log(strings.Join(lines, "\n"))
			n := map[Status]int{}
			for _, v := range c.Verdicts() {
				n[v.Status]++
			}
			b.Logf("%d read, %d skipped, %d failed, %d chunks", n[StatusRead], n[StatusSkipped], n[StatusFailed], len(c.Chunks()))
			logged = true
		}
	}
	b.ReportMetric(500*float64(b.N)/b.Elapsed().Seconds(), "files/s")
}

// longPDF is a 50-page PDF LibreOffice would not be needed for: text in a
// standard font, 45 lines a page.
var longPDF = func() []byte {
	var b bytes.Buffer
	var offs []int
	obj := func(s string) {
		offs = append(offs, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offs), s)
	}
	const n = 50
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
}()
