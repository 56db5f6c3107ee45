package data

import (
	"context"
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
	"time"

	"github.com/inloop/inloop/internal/capped"
	"github.com/inloop/inloop/training/data/extract"
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
	ignored map[string]Verdict // hidden files and folders, links, backups: never read, still listed
	version uint64
}

type document struct {
	hash    [sha256.Size]byte
	chunks  []Chunk
	verdict Verdict
}

type skip struct {
	hash    [sha256.Size]byte
	err     error
	verdict Verdict
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
	return &Corpus{root: abs, tok: tok, opt: opt, docs: map[string]*document{}, skipped: map[string]skip{}, ignored: map[string]Verdict{}}, nil
}

// Root is the corpus folder, absolute.
func (c *Corpus) Root() string { return c.root }

// Scan brings the corpus up to date with the folder and says what changed.
func (c *Corpus) Scan() ([]Change, error) {
	return c.ScanContext(context.Background(), nil)
}

// ScanContext is Scan with progress reported to progress (when not nil)
// after each file, from the scanning goroutine. Cancelling ctx stops it
// between files: the files not reached keep what the corpus knew of them.
func (c *Corpus) ScanContext(ctx context.Context, progress func(ScanProgress)) ([]Change, error) {
	if _, err := os.Stat(c.root); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	changes := c.reconcileProgress(ctx, c.root, nil, progress)
	return changes, ctx.Err()
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

// Verdicts lists every file and hidden folder met in the folder, sorted by
// path, with what became of it: nothing is left out without a line here.
func (c *Corpus) Verdicts() []Verdict {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Verdict, 0, len(c.docs)+len(c.skipped)+len(c.ignored))
	for _, d := range c.docs {
		out = append(out, d.verdict)
	}
	for _, s := range c.skipped {
		out = append(out, s.verdict)
	}
	for _, v := range c.ignored {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Verdict) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Skipped lists files left out (skipped or failed), and why.
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
	return c.reconcileProgress(context.Background(), abs, watchDir, nil)
}

func (c *Corpus) reconcileProgress(ctx context.Context, abs string, watchDir func(string) error, progress func(ScanProgress)) []Change {
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
		return c.syncDir(ctx, abs, rel, watchDir, progress)
	}
	changes := c.removeUnder(rel, false, nil) // it may have been a folder
	if why := ignoredEntry(info.Name(), info.Mode()); why == "" {
		files := []pendingFile{{abs: abs, rel: rel, size: info.Size()}}
		return append(changes, c.updateFiles(ctx, files, progress)...)
	} else {
		changes = append(changes, c.removeUnder(rel, true, nil)...)
		c.ignore(rel, why)
	}
	return changes
}

// ignoredEntry says why a folder entry is not read, or "".
func ignoredEntry(name string, mode fs.FileMode) string {
	if why := ignoredName(name); why != "" {
		return why
	}
	switch {
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link (links are not followed)"
	case !mode.IsRegular() && !mode.IsDir():
		return "not a regular file"
	}
	return ""
}

func (c *Corpus) ignore(rel, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ignored[rel] = Verdict{Path: rel, Status: StatusSkipped, Reason: why}
}

func (c *Corpus) syncDir(ctx context.Context, abs, rel string, watchDir func(string) error, progress func(ScanProgress)) []Change {
	var changes []Change
	var files []pendingFile
	seen := map[string]bool{}
	walkErr := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		r, ok := c.rel(p)
		if !ok {
			// A hidden file or folder: listed once, not entered.
			if r, err := filepath.Rel(c.root, p); err == nil && d != nil {
				r = filepath.ToSlash(r)
				if d.IsDir() {
					r += "/"
				}
				seen[r] = true
				c.ignore(r, "hidden")
			}
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
		default:
			seen[r] = true
			if why := ignoredEntry(d.Name(), d.Type()); why != "" {
				c.ignore(r, why)
				return nil
			}
			var size int64
			if info, err := d.Info(); err == nil {
				size = info.Size()
			}
			files = append(files, pendingFile{abs: p, rel: r, size: size})
		}
		return nil
	})
	if walkErr != nil {
		changes = append(changes, Change{Op: Failed, Path: rel, Err: walkErr})
	}
	changes = append(changes, c.updateFiles(ctx, files, progress)...)
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
	for f := range c.ignored {
		if (inside(f) || (self && f == rel+"/")) && !kept(f) {
			delete(c.ignored, f)
		}
	}
	if len(changes) > 0 {
		c.version++
	}
	slices.SortFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return changes
}

// updateFile re-reads one document; ok is false when nothing changed. It
// may run on several files at once.
func (c *Corpus) updateFile(ctx context.Context, abs, rel string) (ch Change, ok bool) {
	start := time.Now()
	raw, err := capped.ReadFile(abs, c.opt.MaxFileBytes)
	err = withTooLarge(err)
	if errors.Is(err, fs.ErrNotExist) { // gone since it was listed
		if ch := c.removeUnder(rel, true, nil); len(ch) > 0 {
			return ch[0], true
		}
		return Change{}, false
	}
	if err != nil {
		return c.skip(rel, [sha256.Size]byte{}, err, Verdict{})
	}
	hash := sha256.Sum256(raw)
	c.mu.Lock()
	delete(c.ignored, rel)
	old := c.docs[rel]
	prevSkip, wasSkipped := c.skipped[rel]
	c.mu.Unlock()
	if (old != nil && old.hash == hash) || (wasSkipped && prevSkip.hash == hash) {
		return Change{}, false
	}
	v := Verdict{Path: rel, Bytes: int64(len(raw))}
	doc, err := extract.Extract(ctx, rel, raw, docLimits(c.opt))
	v.Format, v.Pages = doc.Format, doc.Pages
	if err != nil {
		v.Took = time.Since(start)
		return c.skip(rel, hash, docError(err), v)
	}
	chunks, err := chunkSections(c.tok, rel, doc.Sections, c.opt)
	v.Took = time.Since(start)
	if err != nil {
		return c.skip(rel, hash, err, v)
	}
	v.Status, v.Chars, v.Chunks, v.Reason = StatusRead, doc.Chars(), len(chunks), strings.Join(doc.Notes, "; ")
	c.mu.Lock()
	defer c.mu.Unlock()
	old = c.docs[rel]
	c.docs[rel] = &document{hash: hash, chunks: chunks, verdict: v}
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
func (c *Corpus) skip(rel string, hash [sha256.Size]byte, err error, v Verdict) (Change, bool) {
	v.Path, v.Status, v.Reason = rel, docStatus(err), err.Error()
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, was := c.skipped[rel]
	c.skipped[rel] = skip{hash: hash, err: err, verdict: v}
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
