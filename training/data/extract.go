package data

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/inloop/inloop/training/data/extract"
)

// IsDocument reports whether a documents folder looks inside a file of this
// name: any file but hidden ones and editors' backup and lock files. What the
// file holds decides the rest (see Verdict).
func IsDocument(name string) bool {
	return ignoredName(filepath.Base(name)) == ""
}

// ignoredName says why a file name is not looked into, or "".
func ignoredName(base string) string {
	switch {
	case base == "":
		return "no name"
	case base[0] == '.':
		return "hidden"
	case base[0] == '#' || strings.HasSuffix(base, "~") || strings.HasPrefix(base, "~$"):
		return "an editor's backup or lock file"
	case strings.HasSuffix(strings.ToLower(base), ".tmp") || strings.HasSuffix(strings.ToLower(base), ".swp"):
		return "a temporary file"
	}
	return ""
}

// Status is what became of one file of a documents folder.
type Status uint8

const (
	StatusRead    Status = iota + 1 // its text is in the dataset
	StatusSkipped                   // left out on purpose: binary, encrypted, no text layer, too large, unsupported, hidden
	StatusFailed                    // reading it failed: damaged, or a reader error
)

func (s Status) String() string {
	switch s {
	case StatusRead:
		return "read"
	case StatusSkipped:
		return "skipped"
	case StatusFailed:
		return "failed"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Verdict is the line the user sees for one file: read (with its pages,
// characters and chunks), skipped (and why) or failed (and the error).
type Verdict struct {
	Path   string // relative to the corpus root, slash-separated; a folder ends in "/"
	Status Status
	Format string // pdf, docx, xlsx, csv, pptx, eml, mbox, html, epub, odt, text, …; "" when not read
	Bytes  int64
	Pages  int // pages, slides, sheets or messages; 0 where the format has none
	Chars  int
	Chunks int
	Reason string        // why it was skipped or failed; for a read file, what to know (pages without text)
	Took   time.Duration // extracting and chunking it
}

func (v Verdict) String() string {
	switch v.Status {
	case StatusRead:
		s := fmt.Sprintf("read %s (%s", v.Path, v.Format)
		if v.Pages > 0 {
			s += fmt.Sprintf(", %d pages", v.Pages)
		}
		s += fmt.Sprintf(", %d characters, %d chunks)", v.Chars, v.Chunks)
		if v.Reason != "" {
			s += ": " + v.Reason
		}
		return s
	}
	return v.Status.String() + " " + v.Path + ": " + v.Reason
}

// docLimits are the extraction limits for a corpus's options.
func docLimits(opt ChunkOptions) extract.Limits {
	return extract.Limits{MaxFileBytes: opt.MaxFileBytes, Timeout: opt.FileTimeout, RowsPerChunk: opt.RowsPerChunk}
}

// docStatus sorts an extraction or chunking error into skipped or failed.
func docStatus(err error) Status {
	if extract.Skipped(err) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBinary) || errors.Is(err, errEmptyDocument) {
		return StatusSkipped
	}
	return StatusFailed
}

// docError keeps an extraction error matching this package's sentinels too.
func docError(err error) error {
	switch {
	case errors.Is(err, extract.ErrTooLarge) && !errors.Is(err, ErrTooLarge):
		return both{err, ErrTooLarge}
	case errors.Is(err, extract.ErrBinary) && !errors.Is(err, ErrBinary):
		return both{err, ErrBinary}
	}
	return err
}

// both is err, also matching a second sentinel.
type both struct{ err, also error }

func (b both) Error() string        { return b.err.Error() }
func (b both) Unwrap() error        { return b.err }
func (b both) Is(target error) bool { return target == b.also }
