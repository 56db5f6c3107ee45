package ui

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A folder of documents lists every file with its verdict under Files.
func TestDataScreenListsFileVerdicts(t *testing.T) {
	u, _ := openUI(t, t.TempDir())
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Permission is hereby granted, free of charge.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "blob"), []byte{0x7f, 'E', 'L', 'F', 0, 0, 1}, 0o644)
	pdf, err := os.ReadFile(filepath.Join("..", "training", "data", "extract", "testdata", "mixed.pdf"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "report.pdf"), pdf, 0o644)
	locked(u, func() { u.data.open(dir) })
	eventually(t, u, "the summary", func() bool { return strings.Contains(u.data.summary.Text, "training examples") })
	want := []string{
		"read LICENSE (text, 45 characters, 1 chunks)",
		"skipped blob: binary file",
		"read report.pdf (pdf, 3 pages, 64 characters, 1 chunks): no text layer on page 2 (scanned?)",
	}
	locked(u, func() {
		if strings.Join(u.data.verdicts, "\n") != strings.Join(want, "\n") {
			t.Errorf("files %q, want %q", u.data.verdicts, want)
		}
		if !strings.Contains(u.data.summary.Text, "1 other file was skipped or failed") {
			t.Errorf("summary %q", u.data.summary.Text)
		}
	})
}
