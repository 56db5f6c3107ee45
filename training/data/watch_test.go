package data

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A generous wait: events normally come one debounce after the change.
const eventTimeout = 10 * time.Second

type watchRig struct {
	t    *testing.T
	root string
	tok  *byteTokenizer
	c    *Corpus
	w    *Watcher
	n    atomic.Int64
}

// newRig watches a folder holding files; scan says whether the corpus is
// scanned before Watch.
func newRig(t *testing.T, files map[string]string, scan bool) *watchRig {
	t.Parallel()
	r := &watchRig{t: t, root: t.TempDir(), tok: &byteTokenizer{}}
	for rel, content := range files {
		write(t, r.root, rel, content)
	}
	var err error
	if r.c, err = NewCorpus(r.root, r.tok, ChunkOptions{Size: 64, Overlap: 4}); err != nil {
		t.Fatal(err)
	}
	if scan {
		if _, err := r.c.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	if r.w, err = r.c.Watch(WatchOptions{Debounce: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.w.Close() })
	return r
}

func (r *watchRig) path(rel string) string { return filepath.Join(r.root, filepath.FromSlash(rel)) }

// expect waits for exactly the changes in want (any order).
func (r *watchRig) expect(want ...string) {
	r.t.Helper()
	var got []Change
	deadline := time.After(eventTimeout)
	for len(got) < len(want) {
		select {
		case ch, ok := <-r.w.Events():
			if !ok {
				r.t.Fatalf("Events closed; got %q, want %q", changeList(got), want)
			}
			got = append(got, ch)
		case <-deadline:
			r.t.Fatalf("after %v got %q, want %q", eventTimeout, changeList(got), want)
		}
	}
	slices.Sort(want)
	if !equal(changeList(got), want) {
		r.t.Fatalf("got %q, want %q", changeList(got), want)
	}
}

// quiet proves no change is still on its way: it creates a marker file and
// expects the marker's event next. A stray event would have been queued
// before the marker's (it comes from an earlier file-system event) and the
// marker's name sorts last within a batch.
func (r *watchRig) quiet() {
	r.t.Helper()
	name := fmt.Sprintf("zz-marker-%d.txt", r.n.Add(1))
	write(r.t, r.root, name, "marker")
	r.expect("added " + name)
}

// has checks a document's text in the corpus.
func (r *watchRig) has(rel, want string) {
	r.t.Helper()
	var got []string
	for _, ch := range r.c.Chunks() {
		if ch.File == rel {
			got = append(got, decode(ch.Tokens))
		}
	}
	if strings.Join(got, "") != want {
		r.t.Errorf("%s in the corpus: %q, want %q", rel, got, want)
	}
}

func (r *watchRig) files() []string {
	return slices.DeleteFunc(r.c.Files(), func(f string) bool { return strings.HasPrefix(f, "zz-marker-") })
}

func TestWatchCreateModifyDelete(t *testing.T) {
	r := newRig(t, map[string]string{"a.txt": "first"}, true)
	r.quiet() // scanned before Watch: no initial events

	write(t, r.root, "b.txt", "new file")
	r.expect("added b.txt")
	r.has("b.txt", "new file")

	for i := range 5 { // a burst of saves is one change
		write(t, r.root, "b.txt", fmt.Sprintf("version %d", i))
	}
	r.expect("modified b.txt")
	r.has("b.txt", "version 4")
	r.quiet()

	calls := r.tok.calls.Load()
	write(t, r.root, "a.txt", "first") // same bytes: not news, not re-tokenized
	r.quiet()
	if got := r.tok.calls.Load() - calls; got != 1 { // the marker's one call
		t.Errorf("%d tokenizer calls, want 1 (the marker only)", got)
	}

	os.Remove(r.path("b.txt"))
	r.expect("removed b.txt")
	if got := r.files(); !equal(got, []string{"a.txt"}) {
		t.Errorf("files %q, want a.txt", got)
	}
}

func TestWatchWithoutScanReportsEverything(t *testing.T) {
	r := newRig(t, map[string]string{"a.txt": "a", "sub/b.md": "b"}, false)
	r.expect("added a.txt", "added sub/b.md")
	write(t, r.root, "sub/c.md", "c") // the subfolder found by the first walk is watched
	r.expect("added sub/c.md")
}

func TestWatchAtomicSave(t *testing.T) {
	r := newRig(t, map[string]string{"doc.md": "original"}, true)

	// Write a temporary file, rename it over the original.
	write(t, r.root, "doc.md.tmp", "saved by rename")
	if err := os.Rename(r.path("doc.md.tmp"), r.path("doc.md")); err != nil {
		t.Fatal(err)
	}
	r.expect("modified doc.md")
	r.has("doc.md", "saved by rename")
	r.quiet()

	// Move the original to a backup, write anew, delete the backup.
	if err := os.Rename(r.path("doc.md"), r.path("doc.md~")); err != nil {
		t.Fatal(err)
	}
	write(t, r.root, "doc.md", "saved with a backup")
	os.Remove(r.path("doc.md~"))
	r.expect("modified doc.md")
	r.has("doc.md", "saved with a backup")
	r.quiet()

	// Editors' swap and lock files are not documents.
	write(t, r.root, ".doc.md.swp", "swap")
	write(t, r.root, "#doc.md#", "autosave")
	r.quiet()
}

func TestWatchSubfolders(t *testing.T) {
	r := newRig(t, nil, true)

	// Created before its folder's watch exists: found by walking the folder.
	write(t, r.root, "sub/deeper/c.txt", "c")
	r.expect("added sub/deeper/c.txt")
	write(t, r.root, "sub/deeper/d.txt", "d") // now through the new watch
	r.expect("added sub/deeper/d.txt")

	write(t, r.root, ".hidden/x.txt", "hidden")
	r.quiet()

	// A renamed folder leaves and arrives, and its subfolders report under the new name.
	if err := os.Rename(r.path("sub"), r.path("moved")); err != nil {
		t.Fatal(err)
	}
	r.expect("removed sub/deeper/c.txt", "removed sub/deeper/d.txt", "added moved/deeper/c.txt", "added moved/deeper/d.txt")
	write(t, r.root, "moved/deeper/e.txt", "e")
	r.expect("added moved/deeper/e.txt")
	r.has("moved/deeper/e.txt", "e")

	if err := os.RemoveAll(r.path("moved")); err != nil {
		t.Fatal(err)
	}
	r.expect("removed moved/deeper/c.txt", "removed moved/deeper/d.txt", "removed moved/deeper/e.txt")
	if got := r.files(); len(got) != 0 {
		t.Errorf("files %q, want none", got)
	}
}

func TestWatchSkipsAndRecovers(t *testing.T) {
	r := newRig(t, map[string]string{"notes.txt": "text"}, true)
	write(t, r.root, "notes.txt", "now\x00binary")
	r.expect("removed notes.txt")
	write(t, r.root, "notes.txt", "text again")
	r.expect("added notes.txt")
	// A binary file is not a document, and still gets its line.
	write(t, r.root, "photo.png", "\x89PNG\x00")
	r.expect("skipped photo.png")
	r.quiet()
}

func TestWatcherClose(t *testing.T) {
	r := newRig(t, nil, true)
	if err := r.w.Close(); err != nil {
		t.Fatal(err)
	}
	r.w.Close()
	select {
	case _, ok := <-r.w.Events():
		if ok {
			t.Error("an event after Close")
		}
	case <-time.After(eventTimeout):
		t.Error("Events not closed by Close")
	}
}

// An edited PDF is extracted again, and only its chunks change.
func TestWatchEditedPDF(t *testing.T) {
	pdf := func(name string) string {
		b, err := os.ReadFile(filepath.Join("extract", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	r := newRig(t, map[string]string{"report.pdf": pdf("report.pdf"), "notes.txt": "unchanged notes"}, true)
	chunksOf := func(file string) []string {
		var out []string
		for _, c := range r.c.Chunks() {
			if c.File == file {
				out = append(out, c.ID+"="+decode(c.Tokens))
			}
		}
		return out
	}
	notesBefore, pdfBefore := chunksOf("notes.txt"), chunksOf("report.pdf")
	if len(pdfBefore) == 0 || !strings.Contains(strings.Join(pdfBefore, ""), "Quarterly Review") {
		t.Fatalf("report.pdf chunks %q", pdfBefore)
	}
	calls := r.tok.calls.Load()
	write(t, r.root, "report.pdf", pdf("mixed.pdf"))
	r.expect("modified report.pdf")
	if got := chunksOf("notes.txt"); !equal(got, notesBefore) {
		t.Errorf("notes.txt chunks %q, want %q", got, notesBefore)
	}
	if got := strings.Join(chunksOf("report.pdf"), ""); !strings.Contains(got, "The third page has words again.") || strings.Contains(got, "Quarterly") {
		t.Errorf("report.pdf after the edit: %q", got)
	}
	if r.tok.calls.Load() == calls {
		t.Error("the edited PDF was not tokenized again")
	}
	for _, v := range r.c.Verdicts() {
		if v.Path == "report.pdf" && (v.Pages != 3 || !strings.Contains(v.Reason, "page 2")) {
			t.Errorf("verdict %v", v)
		}
	}
}
