package extract

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files in testdata were written by LibreOffice 7.4 (Debian 12) from
// small flat OpenDocument sources, and by Python's email and mailbox
// modules; see testdata/README.md.

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const reportText = `Quarterly Review

Revenue grew by twelve percent in the third quarter, driven by the northern region.[1]

Regional figures

Region | Revenue
North | 1200
South | 950

Costs stayed flat.

[1] Figures are unaudited.`

const salesRows = `Region: North; Date: 2024-01-15; Revenue: 1200; Note: Strong, steady
Region: South; Date: 2024-02-03; Revenue: 950
Region: East; Date: 2024-03-21; Revenue: 1100; Note: New office`

const deckText = `Roadmap for next year

Hire two analysts

Open the eastern office

Notes: Mention the budget freeze first.

Risks

Currency swings`

func TestRealFiles(t *testing.T) {
	tests := []struct {
		file, format string
		pages        int
		want         string // the whole text, or with a leading "~" a part of it
		notes        string
	}{
		{"report.docx", "docx", 0, reportText, ""},
		{"report.odt", "odt", 0, reportText, ""},
		{"report.pdf", "pdf", 1, "Quarterly Review\nRevenue grew by twelve percent in the third quarter, driven by the northern\nregion.1\nRegional figures\nRegion Revenue\nNorth 1200\nSouth 950\nCosts stayed flat.\n1 Figures are unaudited.", ""},
		{"mixed.pdf", "pdf", 3, "The first page has words on it.\n\nThe third page has words again.", "no text layer on page 2 (scanned?)"},
		{"report.html", "html", 0, "~Region | Revenue\nNorth | 1200\nSouth | 950\n\nCosts stayed flat.", ""},
		{"report.epub", "epub", 1, "~Revenue grew by twelve percent", ""},
		{"deck.pptx", "pptx", 2, deckText, ""},
		{"deck.odp", "odp", 2, deckText, ""},
		{"sales.csv", "csv", 0, "Rows 2–4\n" + salesRows, ""},
		{"sales.xlsx", "xlsx", 1, "Sheet sales, rows 2–4\n" + salesRows, ""},
		{"sales.ods", "ods", 1, "Sheet sales, rows 2–4\n" + salesRows, ""},
		{"review.eml", "eml", 0, "~From: Ana Pérez <ana@example.com>\nTo: team@example.com\nDate: Tue, 01 Oct 2024 09:30:00 +0200\nSubject: Q3 review — figures attached\n\nHi all,\n\nThe review is attached. Revenue grew twelve percent.\n\nAna\n\nAttachment report.docx:\n\n" + reportText, "attachment scan.png left out: binary file (image/png)"},
		{"thread.mbox", "mbox", 2, "~Subject: Budget\n\nFrom the budget meeting: hold spending flat.\nFrom now on, ask first.\n\nFrom: b1@example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			doc, err := Extract(context.Background(), tt.file, read(t, tt.file), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if doc.Format != tt.format || doc.Pages != tt.pages {
				t.Errorf("format %s with %d pages, want %s with %d", doc.Format, doc.Pages, tt.format, tt.pages)
			}
			got := doc.Text()
			if part, ok := strings.CutPrefix(tt.want, "~"); ok {
				if !strings.Contains(got, part) {
					t.Errorf("text %q\ndoes not hold %q", got, part)
				}
			} else if got != tt.want {
				t.Errorf("text %q\nwant %q", got, tt.want)
			}
			if n := strings.Join(doc.Notes, "; "); n != tt.notes {
				t.Errorf("notes %q, want %q", n, tt.notes)
			}
		})
	}
}

// A file's content decides its format, not its name: a PDF renamed to .txt
// is a PDF, an extensionless license is text, an extensionless mail a mail.
func TestSniffing(t *testing.T) {
	tests := []struct {
		name   string
		raw    []byte
		format string
		err    error
	}{
		{"LICENSE", []byte("Permission is hereby granted, free of charge, to any person obtaining a copy\n"), "text", nil},
		{"COPYING", []byte("\xef\xbb\xbfGNU GENERAL PUBLIC LICENSE\r\nVersion 3\r\n"), "text", nil},
		{"notes.weird-ext", []byte("plain words"), "text", nil},
		{"report.txt", read(t, "report.pdf"), "pdf", nil},
		{"report", read(t, "report.docx"), "docx", nil},
		{"message", read(t, "review.eml"), "eml", nil},
		{"mailbox", read(t, "thread.mbox"), "mbox", nil},
		{"page", []byte("<!DOCTYPE html><p>Hi &amp; bye</p>"), "html", nil},
		{"photo.jpg", []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00"), "", ErrBinary},
		{"blob", []byte{1, 2, 3, 0, 5, 6}, "", ErrBinary},
		{"archive.zip", zipOf(t, map[string]string{"a.txt": "x"}), "", ErrUnsupported},
		{"old.doc", append([]byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}, make([]byte, 512)...), "", ErrUnsupported},
		{"locked.docx", append(append([]byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}, make([]byte, 64)...), utf16le("EncryptedPackage")...), "", ErrEncrypted},
		{"locked.pdf", read(t, "locked.pdf"), "pdf", ErrEncrypted},
		{"scan.pdf", read(t, "scan.pdf"), "pdf", ErrNoText},
		{"empty.txt", nil, "text", ErrNoText},
	}
	for _, tt := range tests {
		doc, err := Extract(context.Background(), tt.name, tt.raw, Limits{})
		if got := Format(tt.name, tt.raw); got != tt.format {
			t.Errorf("%s: format %q, want %q", tt.name, got, tt.format)
		}
		if tt.err == nil && (err != nil || doc.Chars() == 0) {
			t.Errorf("%s: %d characters, %v", tt.name, doc.Chars(), err)
		}
		if tt.err != nil && (!errors.Is(err, tt.err) || !Skipped(err)) {
			t.Errorf("%s: error %v, want %v (a skip)", tt.name, err, tt.err)
		}
	}
}

func TestDecodeText(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"\xef\xbb\xbfline\r\nnext\rlast", "line\nnext\nlast"},
		{string([]byte{0xff, 0xfe, 'h', 0, 'i', 0, '\r', 0, '\n', 0}), "hi\n"},
		{"caf\xe9 cr\xe8me", "café crème"},              // Windows-1252
		{"na\xc3\xafve \xff word", "naïve \uFFFD word"}, // UTF-8 with a stray byte
	}
	for _, tt := range tests {
		if got := decodeText([]byte(tt.raw)); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestHTML(t *testing.T) {
	page := `<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style></head>
<body><h1>Title</h1><!-- note --><p>Hello &amp; <b>bye</b>s</p><script>alert("<p>")</script>
<p>Two   words</p><ul><li>a</li><li>b</li></ul><pre>keep
  this</pre><table><tr><td>x<td>y<tr><td>z</table><p>end</body></html>`
	want := "Title\n\nHello & byes\n\nTwo words\n\na\nb\n\nkeep\n  this\n\nx | y\nz\n\nend"
	doc, err := Extract(context.Background(), "p.html", []byte(page), Limits{})
	if err != nil || doc.Text() != want {
		t.Errorf("got %q, %v\nwant %q", doc.Text(), err, want)
	}
}

func TestRowsPerChunk(t *testing.T) {
	var b strings.Builder
	b.WriteString("id;name\n")
	for i := range 120 {
		b.WriteString(strings.Repeat("x", i%3+1) + ";row\n")
	}
	doc, err := Extract(context.Background(), "t.csv", []byte(b.String()), Limits{RowsPerChunk: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Sections) != 3 || !strings.HasPrefix(doc.Sections[2], "Rows 102–121\nid: xx; name: row") {
		t.Fatalf("%d sections, last %.40q", len(doc.Sections), doc.Sections[len(doc.Sections)-1])
	}
	for _, s := range doc.Sections {
		if n := strings.Count(s, "\n"); n > 50 {
			t.Errorf("a section of %d rows", n)
		}
	}
}
