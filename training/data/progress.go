package data

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// ScanProgress reports a scan after each file it has looked at.
type ScanProgress struct {
	Done, Total           int   // files
	DoneBytes, TotalBytes int64 // their sizes
	Elapsed               time.Duration
	// ETA is the time the rest should take at the pace so far, weighing
	// files and bytes alike (a PDF costs more per byte than a text file, a
	// folder of small notes more per file); 0 until something is done.
	ETA  time.Duration
	Last Verdict // the file just finished (Path "" when it had not changed)
}

func (p ScanProgress) String() string {
	s := fmt.Sprintf("%d/%d files, %s of %s", p.Done, p.Total, sizeText(p.DoneBytes), sizeText(p.TotalBytes))
	if p.Done < p.Total && p.ETA > 0 {
		s += fmt.Sprintf(", about %s left", p.ETA.Round(time.Second))
	}
	return s
}

// eta estimates the time left from the fractions of files and bytes done.
func eta(elapsed time.Duration, done, total int, doneBytes, totalBytes int64) time.Duration {
	if done == 0 || total == 0 {
		return 0
	}
	frac := float64(done) / float64(total)
	if totalBytes > 0 {
		frac = (frac + float64(doneBytes)/float64(totalBytes)) / 2
	}
	if frac <= 0 || frac >= 1 {
		return 0
	}
	return time.Duration(float64(elapsed) * (1 - frac) / frac)
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// pendingFile is a file a scan will look at.
type pendingFile struct {
	abs, rel string
	size     int64
}

// updateFiles re-reads files on opt.Workers goroutines, reporting progress
// after each, and returns the changes sorted by path. Cancelling ctx stops
// it before the next file.
func (c *Corpus) updateFiles(ctx context.Context, files []pendingFile, progress func(ScanProgress)) []Change {
	var total int64
	for _, f := range files {
		total += f.size
	}
	start := time.Now()
	jobs := make(chan pendingFile)
	type result struct {
		f   pendingFile
		ch  Change
		ok  bool
		got Verdict
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for range min(c.opt.Workers, max(len(files), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range jobs {
				ch, ok := c.updateFile(ctx, f.abs, f.rel)
				var v Verdict
				if ok {
					v = c.verdict(f.rel)
				}
				results <- result{f, ch, ok, v}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, f := range files {
			select {
			case jobs <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	var changes []Change
	p := ScanProgress{Total: len(files), TotalBytes: total}
	for r := range results {
		if r.ok {
			changes = append(changes, r.ch)
		}
		p.Done++
		p.DoneBytes += r.f.size
		p.Elapsed = time.Since(start)
		p.ETA = eta(p.Elapsed, p.Done, p.Total, p.DoneBytes, p.TotalBytes)
		p.Last = r.got
		if progress != nil {
			progress(p)
		}
	}
	slices.SortFunc(changes, func(a, b Change) int { return cmp.Compare(a.Path, b.Path) })
	return changes
}

// verdict is one file's verdict, or a zero Verdict.
func (c *Corpus) verdict(rel string) Verdict {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if d := c.docs[rel]; d != nil {
		return d.verdict
	}
	if s, ok := c.skipped[rel]; ok {
		return s.verdict
	}
	return c.ignored[rel]
}

// VerdictTable writes verdicts one per line, then a count by status.
func VerdictTable(vs []Verdict) string {
	var b strings.Builder
	n := map[Status]int{}
	for _, v := range vs {
		b.WriteString(v.String() + "\n")
		n[v.Status]++
	}
	fmt.Fprintf(&b, "%d read, %d skipped, %d failed\n", n[StatusRead], n[StatusSkipped], n[StatusFailed])
	return b.String()
}
