package data

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// write creates a file under root, with its folders.
func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func changeList(chs []Change) []string {
	var out []string
	for _, c := range chs {
		out = append(out, c.Op.String()+" "+c.Path)
	}
	slices.Sort(out)
	return out
}

func TestCorpusScan(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.txt", "Hello world.")
	write(t, root, "notes/b.md", "# B\n\nSome notes.")
	write(t, root, "notes/deep/page.html", "<p>Hi &amp; bye</p>")
	write(t, root, ".git/config.txt", "hidden folder")
	write(t, root, ".draft.txt", "hidden file")
	write(t, root, "photo.png", "\x89PNG\x00\x00")
	write(t, root, "data.json", "{\"a\":\x00}")
	write(t, root, "empty.txt", "")
	write(t, root, "big.txt", strings.Repeat("x", 101))
	write(t, root, "backup.txt~", "editor backup")
	os.Symlink(filepath.Join(root, "a.txt"), filepath.Join(root, "link.txt"))

	tok := &byteTokenizer{}
	c, err := NewCorpus(root, tok, ChunkOptions{Size: 64, Overlap: 8, Prefix: []int{testBOS}, MaxFileBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	changes, err := c.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"added a.txt", "added notes/b.md", "added notes/deep/page.html",
		"skipped big.txt", "skipped data.json", "skipped empty.txt", "skipped photo.png"}
	if got := changeList(changes); !equal(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
	// Every entry has a line, hidden and linked ones included.
	var verdicts []string
	for _, v := range c.Verdicts() {
		verdicts = append(verdicts, v.Status.String()+" "+v.Path)
	}
	wantVerdicts := []string{"skipped .draft.txt", "skipped .git/", "read a.txt", "skipped backup.txt~", "skipped big.txt",
		"skipped data.json", "skipped empty.txt", "skipped link.txt", "read notes/b.md", "read notes/deep/page.html", "skipped photo.png"}
	if !equal(verdicts, wantVerdicts) {
		t.Errorf("verdicts %q, want %q", verdicts, wantVerdicts)
	}
	for _, ch := range changes {
		if ch.Path == "data.json" && !errors.Is(ch.Err, ErrBinary) || ch.Path == "big.txt" && !errors.Is(ch.Err, ErrTooLarge) {
			t.Errorf("%v: wrong reason", ch)
		}
	}
	if got := c.Files(); !equal(got, []string{"a.txt", "notes/b.md", "notes/deep/page.html"}) {
		t.Errorf("files %q", got)
	}
	if got := len(c.Skipped()); got != 4 {
		t.Errorf("%d skipped, want 4: %v", got, c.Skipped())
	}
	var got []string
	for _, ex := range c.Examples() {
		got = append(got, ex.Source+"="+decode(ex.Tokens))
		if ex.Targets() != len(ex.Tokens)-1 {
			t.Errorf("%s: %d targets, want every token after the first", ex.Source, ex.Targets())
		}
	}
	wantEx := []string{"a.txt#0=<s>Hello world.", "notes/b.md#0=<s># B\n\nSome notes.", "notes/deep/page.html#0=<s>Hi & bye"}
	if !equal(got, wantEx) {
		t.Errorf("examples %q, want %q", got, wantEx)
	}

	// Nothing changed: nothing re-read into the tokenizer, nothing reported.
	v, calls := c.Version(), tok.calls.Load()
	write(t, root, "a.txt", "Hello world.") // same bytes again
	if changes, _ := c.Scan(); len(changes) != 0 || tok.calls.Load() != calls || c.Version() != v {
		t.Errorf("rescan of unchanged files: changes %v, %d tokenizer calls, version %d→%d", changes, tok.calls.Load()-calls, v, c.Version())
	}

	// One file changed: only it is tokenized again (its text has no breaks: one call).
	write(t, root, "notes/b.md", "changed")
	changes, _ = c.Scan()
	if got := changeList(changes); !equal(got, []string{"modified notes/b.md"}) || tok.calls.Load() != calls+1 {
		t.Errorf("changes %q with %d tokenizer calls, want modified notes/b.md with 1", got, tok.calls.Load()-calls)
	}

	// A skipped file that becomes usable comes in; removals go out.
	write(t, root, "data.json", `{"a": 1}`)
	os.Remove(filepath.Join(root, "a.txt"))
	os.RemoveAll(filepath.Join(root, "notes"))
	changes, _ = c.Scan()
	want = []string{"added data.json", "removed a.txt", "removed notes/b.md", "removed notes/deep/page.html"}
	if got := changeList(changes); !equal(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
	if got := c.Files(); !equal(got, []string{"data.json"}) {
		t.Errorf("files %q, want data.json", got)
	}
}

func TestCorpusChunksLongDocument(t *testing.T) {
	root := t.TempDir()
	write(t, root, "long.md", "First paragraph here.\n\nSecond one is longer than that.\n\nThird.")
	c, err := NewCorpus(root, &byteTokenizer{}, ChunkOptions{Size: 40, Overlap: 5})
	if err != nil {
		t.Fatal(err)
	}
	c.Scan()
	var got []string
	for _, ch := range c.Chunks() {
		got = append(got, ch.ID+"="+decode(ch.Tokens))
	}
	want := []string{"long.md#0=First paragraph here.\n\n", "long.md#1=re.\n\nSecond one is longer than that.\n\n", "long.md#2=at.\n\nThird."}
	if !equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCorpusTokenizerErrorSkipsFile(t *testing.T) {
	root := t.TempDir()
	write(t, root, "ok.txt", "fine")
	write(t, root, "bad.txt", "has \x7f in it")
	c, _ := NewCorpus(root, &byteTokenizer{}, ChunkOptions{})
	changes, _ := c.Scan()
	if got := changeList(changes); !equal(got, []string{"added ok.txt", "skipped bad.txt"}) {
		t.Errorf("changes %q", got)
	}
}
