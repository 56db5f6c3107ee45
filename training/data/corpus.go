package data

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/inloop/inloop/internal/capped"
)

// Op is what happened to a document.
type Op uint8

const (
	Added    Op = iota + 1 // a new document is in the dataset
	Modified               // a document's content changed and it was chunked again
	Removed                // a document left the dataset (deleted, renamed away, or now unusable: see Err)
	Skipped                // a document-like file cannot be used (binary, too large, no text): see Err
	Failed                 // the folder could not be read or watched: see Err
)

func (o Op) String() string {
	switch o {
	case Added:
		return "added"
	case Modified:
		return "modified"
	case Removed:
		return "removed"
	case Skipped:
		return "skipped"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Change is one update to a corpus.
type Change struct {
	Op     Op
	Path   string // relative to the corpus root, slash-separated
	Chunks int    // the document's chunks after the change
	Err    error
}

func (c Change) String() string {
	s := c.Op.String() + " " + c.Path
	if c.Op == Added || c.Op == Modified {
		s += fmt.Sprintf(" (%d chunks)", c.Chunks)
	}
	if c.Err != nil {
		s += ": " + c.Err.Error()
	}
	return s
}

// Corpus is a folder of the user's documents as training chunks. Each file is
// tokenized once per content: Scan and the Watcher re-read a changed file,
// and a file whose bytes hash the same as before is left alone. Hidden files
// and folders, symlinks, and files that are not plain text are left out.
// A Corpus is safe for concurrent use.
type Corpus struct {
	root string
	tok  Tokenizer
	opt  ChunkOptions

	update  sync.Mutex // one writer at a time: Scan or the Watcher
	mu      sync.RWMutex
	docs    map[string]*document // by relative path
	skipped map[string]skip
	version uint64
}

type document struct {
	hash   [sha256.Size]byte
	chunks []Chunk
}

type skip struct {
	hash [sha256.Size]byte
	err  error
}

// NewCorpus makes an empty corpus for the folder root; Scan or Watch fills it.
func NewCorpus(root string, tok Tokenizer, opt ChunkOptions) (*Corpus, error) {
	if tok == nil {
		return nil, errors.New("data: corpus needs a tokenizer")
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if info, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	} else if !info.IsDir() {
		return nil, fmt.Errorf("data: %s is not a folder", root)
	}
	return &Corpus{root: abs, tok: tok, opt: opt, docs: map[string]*document{}, skipped: map[string]skip{}}, nil
}

// Root is the corpus folder, absolute.
func (c *Corpus) Root() string { return c.root }

// Scan brings the corpus up to date with the folder and says what changed.
func (c *Corpus) Scan() ([]Change, error) {
	if _, err := os.Stat(c.root); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return c.reconcile(c.root, nil), nil
}

// Version grows with every change, so a trainer can tell its batches are stale.
func (c *Corpus) Version() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version
}

// Files lists the documents in the dataset, sorted.
func (c *Corpus) Files() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.sortedLocked()
}

// Chunks returns every chunk, by file and then index.
func (c *Corpus) Chunks() []Chunk {
	var out []Chunk
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, f := range c.sortedLocked() {
		out = append(out, c.docs[f].chunks...)
	}
	return out
}

func (c *Corpus) sortedLocked() []string {
	files := make([]string, 0, len(c.docs))
	for f := range c.docs {
		files = append(files, f)
	}
	slices.Sort(files)
	return files
}

// Examples returns the chunks as training examples, every token learned, each
// preceded by ChunkOptions.Prefix.
func (c *Corpus) Examples() []Example {
	chunks := c.Chunks()
	out := make([]Example, len(chunks))
	prefix, _ := toInt32(c.opt.Prefix)
	for i, ch := range chunks {
		toks := append(slices.Clip(prefix), ch.Tokens...)
		mask := make([]bool, len(toks))
		for j := range mask {
			mask[j] = true
		}
		out[i] = Example{Tokens: toks, Mask: mask, Source: ch.ID}
	}
	return out
}

// Skipped lists document-like files left out, and why.
func (c *Corpus) Skipped() []Issue {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Issue, 0, len(c.skipped))
	for f, s := range c.skipped {
		out = append(out, Issue{File: f, Problem: s.err.Error()})
	}
	slices.SortFunc(out, func(a, b Issue) int { return strings.Compare(a.File, b.File) })
	return out
}

// rel turns an absolute path under the root into the corpus's name for it;
// ok is false outside the root and inside hidden folders.
func (c *Corpus) rel(abs string) (string, bool) {
	r, err := filepath.Rel(c.root, abs)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	r = filepath.ToSlash(r)
	if r == "." {
		return ".", true
	}
	for _, part := range strings.Split(r, "/") {
		if strings.HasPrefix(part, ".") {
			return "", false
		}
	}
	return r, true
}

// reconcile makes the corpus agree with the file system at abs, a file or a
// folder (walked), whether it exists or not. watchDir, when set, is called
// for every folder met before its entries are listed, so nothing created
// meanwhile goes unseen.
func (c *Corpus) reconcile(abs string, watchDir func(string) error) []Change {
	c.update.Lock()
	defer c.update.Unlock()
	rel, ok := c.rel(abs)
	if !ok {
		return nil
	}
	info, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c.removeUnder(rel, true, nil)
	case err != nil:
		return []Change{{Op: Failed, Path: rel, Err: err}}
	case info.IsDir():
		return c.syncDir(abs, rel, watchDir)
	}
	changes := c.removeUnder(rel, false, nil) // it may have been a folder
	if info.Mode().IsRegular() && IsDocument(info.Name()) {
		if ch, ok := c.updateFile(abs, rel); ok {
			changes = append(changes, ch)
		}
		return changes
	}
	return append(changes, c.removeUnder(rel, true, nil)...)
}

func (c *Corpus) syncDir(abs, rel string, watchDir func(string) error) []Change {
	var changes []Change
	seen := map[string]bool{}
	walkErr := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		r, ok := c.rel(p)
		if !ok {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if err != nil {
			changes = append(changes, Change{Op: Failed, Path: r, Err: err})
			if d != nil && d.IsDir() {
				seen[r+"/"] = true // keep what we knew of an unreadable folder
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if watchDir != nil {
				if err := watchDir(p); err != nil {
					changes = append(changes, Change{Op: Failed, Path: r, Err: fmt.Errorf("watch: %w", err)})
				}
			}
		case d.Type().IsRegular() && IsDocument(d.Name()):
			seen[r] = true
			if ch, ok := c.updateFile(p, r); ok {
				changes = append(changes, ch)
			}
		}
		return nil
	})
	if walkErr != nil {
		changes = append(changes, Change{Op: Failed, Path: rel, Err: walkErr})
	}
	return append(changes, c.removeUnder(rel, rel != ".", seen)...)
}

// removeUnder drops documents inside the folder rel (and rel itself when self
// is set) that keep is not holding on to.
func (c *Corpus) removeUnder(rel string, self bool, keep map[string]bool) []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	var changes []Change
	inside := func(f string) bool {
		if rel == "." {
			return true
		}
		return (self && f == rel) || strings.HasPrefix(f, rel+"/")
	}
	kept := func(f string) bool {
		if keep[f] {
			return true
		}
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			if keep[d+"/"] {
				return true
			}
		}
		return false
	}
	for f := range c.docs {
		if inside(f) && !kept(f) {
			delete(c.docs, f)
			changes = append(changes, Change{Op: Removed, Path: f})
		}
	}
	for f := range c.skipped {
		if inside(f) && !kept(f) {
			delete(c.skipped, f)
		}
	}
	if len(changes) > 0 {
		c.version++
	}
	slices.SortFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return changes
}

// updateFile re-reads one document; ok is false when nothing changed.
func (c *Corpus) updateFile(abs, rel string) (ch Change, ok bool) {
	raw, err := capped.ReadFile(abs, c.opt.MaxFileBytes)
	err = withTooLarge(err)
	if errors.Is(err, fs.ErrNotExist) { // gone since it was listed
		if ch := c.removeUnder(rel, true, nil); len(ch) > 0 {
			return ch[0], true
		}
		return Change{}, false
	}
	if err != nil {
		return c.skip(rel, [sha256.Size]byte{}, err)
	}
	hash := sha256.Sum256(raw)
	c.mu.RLock()
	old := c.docs[rel]
	prevSkip, wasSkipped := c.skipped[rel]
	c.mu.RUnlock()
	if (old != nil && old.hash == hash) || (wasSkipped && prevSkip.hash == hash) {
		return Change{}, false
	}
	text, err := documentText(rel, raw)
	if err != nil {
		return c.skip(rel, hash, err)
	}
	chunks, err := chunkDocument(c.tok, rel, text, c.opt)
	if err != nil {
		return c.skip(rel, hash, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.docs[rel] = &document{hash: hash, chunks: chunks}
	delete(c.skipped, rel)
	c.version++
	op := Added
	if old != nil {
		op = Modified
	}
	return Change{Op: op, Path: rel, Chunks: len(chunks)}, true
}

// skip leaves a file out, removing it if it was in; a file skipped again for
// the same bytes is not news.
func (c *Corpus) skip(rel string, hash [sha256.Size]byte, err error) (Change, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, was := c.skipped[rel]
	c.skipped[rel] = skip{hash: hash, err: err}
	if _, in := c.docs[rel]; in {
		delete(c.docs, rel)
		c.version++
		return Change{Op: Removed, Path: rel, Err: err}, true
	}
	if was && prev.hash == hash && prev.err.Error() == err.Error() {
		return Change{}, false
	}
	return Change{Op: Skipped, Path: rel, Err: err}, true
}
