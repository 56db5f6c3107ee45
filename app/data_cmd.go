package app

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/inloop/inloop/internal/termsafe"
)

func init() {
	register(command{name: "data", summary: "read a JSONL file or a folder of documents as training would: every file's verdict (read, skipped, failed) and what a run gets", run: dataCmd})
}

func dataCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("data", stderr)
	wf := addWorkspaceFlags(fs)
	model := fs.String("model", "demo", "model whose tokenizer counts the tokens: demo, a folder, a pulled ORG/NAME or a remembered name")
	problems := fs.Bool("problems", false, "list only the files skipped or failed")
	every := fs.Duration("progress", time.Second, "how often to print progress while a folder is read (0: never)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inloop data [flags] PATH\n\nPATH is a JSONL file, a folder with train/valid/test.jsonl, or a folder of documents\n(PDF, Word, OpenDocument, Excel, CSV, PowerPoint, mail, web pages, EPUB, text).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("want one PATH, got %d", fs.NArg())
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	var last time.Time
	progress := func(p Progress) {
		if *every <= 0 || (time.Since(last) < *every && p.Done < p.Total) {
			return
		}
		last = time.Now()
		fmt.Fprintln(stderr, termsafe.String(p.Message))
	}
	sum, err := w.InspectDataProgress(e.ctx, *model, fs.Arg(0), progress)
	printSummary(stdout, sum, *problems)
	return err
}

// printSummary writes what inspecting a data path found: for documents a
// line per file, then the totals.
func printSummary(out io.Writer, s DataSummary, problemsOnly bool) {
	if len(s.Verdicts) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STATUS\tFILE\tFORMAT\tPAGES\tCHARACTERS\tCHUNKS\tNOTE")
		counts := map[string]int{}
		for _, v := range s.Verdicts {
			counts[v.Status.String()]++
			if problemsOnly && v.Status == DocumentRead {
				continue
			}
			pages, chars, chunks := "", "", ""
			if v.Status == DocumentRead {
				chars, chunks = fmt.Sprint(v.Chars), fmt.Sprint(v.Chunks)
				if v.Pages > 0 {
					pages = fmt.Sprint(v.Pages)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Status, termsafe.String(v.Path), v.Format, pages, chars, chunks, termsafe.String(v.Reason))
		}
		tw.Flush()
		fmt.Fprintf(out, "\n%d files: %d read, %d skipped, %d failed\n", len(s.Verdicts), counts["read"], counts["skipped"], counts["failed"])
	} else {
		for _, p := range s.Problems {
			fmt.Fprintln(out, "problem: "+termsafe.String(p))
		}
	}
	if s.Kind != "" {
		fmt.Fprintf(out, "%s: %d training examples (%d tokens), %d validation, %d test\n", s.Kind, s.Train, s.Tokens, s.Valid, s.Test)
	}
}
