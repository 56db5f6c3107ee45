package data

import (
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions tune a Watcher.
type WatchOptions struct {
	// Debounce is how long a path must stay quiet before it is re-read;
	// 0 means 300 ms. Editors save in bursts (write, rename, delete a backup),
	// and one re-read after the burst sees the end state.
	Debounce time.Duration
	// MaxDelay bounds how long a path that never stays quiet (a log being
	// appended to) waits; 0 means 10 × Debounce.
	MaxDelay time.Duration
}

// Watcher keeps a Corpus current while the user edits the folder. It does not
// trust event kinds: a path that saw any event is, once quiet, compared with
// what is on disk, so an editor's atomic save (write a temporary file, rename
// it over the original, or move the original to a backup first) reads as one
// Modified, and a new or renamed folder is walked and watched. Folders are
// watched one by one (fsnotify is not recursive); hidden ones are not.
type Watcher struct {
	c        *Corpus
	fw       *fsnotify.Watcher
	opt      WatchOptions
	events   chan Change
	done     chan struct{}
	finished chan struct{}
	close    sync.Once
	closeErr error
}

// Watch brings the corpus up to date, watches its folder and returns; the
// changes found on the way (everything, if Scan was not called) are the first
// events. Close the Watcher when done.
func (c *Corpus) Watch(opt WatchOptions) (*Watcher, error) {
	if opt.Debounce <= 0 {
		opt.Debounce = 300 * time.Millisecond
	}
	if opt.MaxDelay <= 0 {
		opt.MaxDelay = 10 * opt.Debounce
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		c: c, fw: fw, opt: opt,
		events:   make(chan Change, 64),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	if err := fw.Add(c.root); err != nil {
		fw.Close()
		return nil, err
	}
	initial := c.reconcile(c.root, fw.Add)
	go w.loop(initial)
	return w, nil
}

// Events delivers changes to the corpus, in the order they were made; it is
// closed by Close. Read it promptly: a full channel holds the watcher back
// (the operating system's queue then overflows, and the watcher rescans).
func (w *Watcher) Events() <-chan Change { return w.events }

// Close stops watching and closes Events. It is safe to call more than once.
func (w *Watcher) Close() error {
	w.close.Do(func() {
		close(w.done)
		w.closeErr = w.fw.Close()
		<-w.finished
		close(w.events)
	})
	return w.closeErr
}

// dirty is a path waiting to be quiet.
type dirty struct{ first, last time.Time }

func (w *Watcher) loop(initial []Change) {
	defer close(w.finished)
	for _, ch := range initial {
		if !w.emit(ch) {
			return
		}
	}
	pending := map[string]dirty{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	mark := func(p string) {
		now := time.Now()
		d, ok := pending[p]
		if !ok {
			d.first = now
		}
		d.last = now
		pending[p] = d
		if !armed {
			timer.Reset(w.opt.Debounce)
			armed = true
		}
	}
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			// Attribute changes come from indexers and virus scanners, not edits.
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if _, ok := w.c.rel(ev.Name); ok {
				mark(filepath.Clean(ev.Name))
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				mark(w.c.root) // events were lost: compare everything
			} else if !w.emit(Change{Op: Failed, Path: ".", Err: err}) {
				return
			}
		case <-timer.C:
			armed = false
			now := time.Now()
			var due []string
			var next time.Time
			for p, d := range pending {
				at := d.last.Add(w.opt.Debounce)
				if limit := d.first.Add(w.opt.MaxDelay); limit.Before(at) {
					at = limit
				}
				if !at.After(now) {
					due = append(due, p)
					delete(pending, p)
				} else if next.IsZero() || at.Before(next) {
					next = at
				}
			}
			for _, ch := range w.flush(due) {
				if !w.emit(ch) {
					return
				}
			}
			if !next.IsZero() {
				timer.Reset(max(next.Sub(time.Now()), time.Millisecond))
				armed = true
			}
		}
	}
}

// flush reconciles quiet paths: the vanished first, so a folder renamed
// within the tree leaves before it arrives under its new name, then the
// rest in name order.
func (w *Watcher) flush(paths []string) []Change {
	w.dropStaleWatches()
	exists := map[string]bool{}
	for _, p := range paths {
		_, err := os.Lstat(p)
		exists[p] = err == nil
	}
	slices.SortFunc(paths, func(a, b string) int {
		return cmp.Or(cmp.Compare(b2i(exists[a]), b2i(exists[b])), cmp.Compare(a, b))
	})
	var changes []Change
	for _, p := range paths {
		changes = append(changes, w.c.reconcile(p, w.fw.Add)...)
	}
	return changes
}

// dropStaleWatches forgets watches whose folder is no longer at its path.
// When a folder is renamed, the watches on the folders inside it follow the
// moved folders but keep reporting under the old names, and adding the new
// name would only find that same watch again; removing it first makes the
// new name's watch report under the new name.
func (w *Watcher) dropStaleWatches() {
	for _, p := range w.fw.WatchList() {
		if info, err := os.Stat(p); err != nil || !info.IsDir() {
			w.fw.Remove(p) // it may be gone already; either way it is not watched now
		}
	}
}

func (w *Watcher) emit(ch Change) bool {
	select {
	case w.events <- ch:
		return true
	case <-w.done:
		return false
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
