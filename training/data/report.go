package data

import (
	"errors"
	"fmt"
	"strings"
)

// Issue is one problem with one row (Line > 0) or a whole file (Line 0).
type Issue struct {
	File    string
	Line    int
	Problem string
}

func (i Issue) Error() string {
	if i.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", i.File, i.Line, i.Problem)
	}
	return i.File + ": " + i.Problem
}

// FileStats counts what happened to one file's rows.
type FileStats struct {
	Path     string
	Format   Format
	Rows     int // non-blank lines
	Examples int // rows kept
	Bad      int // rows dropped, each with an Issue
	Warned   int // rows kept with a caveat
}

// Report collects what loading found. Bad rows are dropped and listed; the rest
// of their file is kept.
type Report struct {
	Files    []FileStats
	Issues   []Issue // dropped rows, at most Limits.MaxIssues per file
	Warnings []Issue // kept rows with a caveat, same cap
	Omitted  int     // issues and warnings beyond the cap
}

// Err joins the listed issues, or is nil when every row was usable.
func (r *Report) Err() error {
	if len(r.Issues) == 0 {
		return nil
	}
	errs := make([]error, len(r.Issues))
	for i, is := range r.Issues {
		errs[i] = is
	}
	return errors.Join(errs...)
}

// String summarizes the report for a log or the UI: a line per file, then the
// issues and warnings.
func (r *Report) String() string {
	var b strings.Builder
	for _, f := range r.Files {
		fmt.Fprintf(&b, "%s: %s, %d rows, %d kept, %d dropped", f.Path, f.Format, f.Rows, f.Examples, f.Bad)
		if f.Warned > 0 {
			fmt.Fprintf(&b, ", %d with warnings", f.Warned)
		}
		b.WriteByte('\n')
	}
	for _, is := range r.Issues {
		b.WriteString("error: " + is.Error() + "\n")
	}
	for _, is := range r.Warnings {
		b.WriteString("warning: " + is.Error() + "\n")
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "(%d more not listed)\n", r.Omitted)
	}
	return b.String()
}

// fileLog records one file's rows into a Report, keeping at most max entries.
type fileLog struct {
	r     *Report
	i     int // index into r.Files
	max   int
	shown int
}

func (r *Report) file(path string, max int) *fileLog {
	r.Files = append(r.Files, FileStats{Path: path})
	return &fileLog{r: r, i: len(r.Files) - 1, max: max}
}

func (l *fileLog) stats() *FileStats { return &l.r.Files[l.i] }

func (l *fileLog) bad(line int, problem string) {
	l.stats().Bad++
	l.add(&l.r.Issues, line, problem)
}

func (l *fileLog) warn(line int, problem string) {
	l.stats().Warned++
	l.add(&l.r.Warnings, line, problem)
}

func (l *fileLog) add(list *[]Issue, line int, problem string) {
	if l.shown >= l.max {
		l.r.Omitted++
		return
	}
	l.shown++
	*list = append(*list, Issue{File: l.stats().Path, Line: line, Problem: problem})
}
