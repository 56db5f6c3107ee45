package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// inloop data on a folder as a new user has one: two license texts without
// an extension, a Markdown file, a binary blob, and real PDF, Word and
// spreadsheet files. Every file gets a line; progress goes to stderr.
func TestDataCommandVerdicts(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"LICENSE":  "Permission is hereby granted, free of charge, to any person obtaining a copy.\n",
		"COPYING":  "GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n",
		"notes.md": "# Notes\n\nThe board meets on Fridays.\n",
		"blob":     "\x7fELF\x02\x01\x01\x00\x00\x00",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"report.pdf", "report.docx", "sales.xlsx", "scan.pdf"} {
		b, err := os.ReadFile(filepath.Join("..", "training", "data", "extract", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	var out, errb bytes.Buffer
	code := Main([]string{"data", "--data-dir", t.TempDir(), "--backend", "cpu", "--progress", "1ns", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"read     COPYING", "read     LICENSE", "read     notes.md",
		"skipped  blob                                            binary file",
		"read     report.pdf   pdf     1", "read     report.docx  docx", "read     sales.xlsx   xlsx    1",
		"skipped  scan.pdf     pdf", "no text layer on any of its 1 pages",
		"8 files: 6 read, 2 skipped, 0 failed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(errb.String(), "reading documents: 8/8 files") {
		t.Errorf("no progress on stderr:\n%s", errb.String())
	}
}
