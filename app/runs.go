package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/inloop/inloop/internal/termsafe"
	"github.com/inloop/inloop/store"
)

func init() {
	register(command{name: "runs", summary: "list past and running jobs; 'runs show ID' for one, 'runs resume ID' to continue one", run: runsCmd})
}

func runsCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("runs", stderr)
	wf := addWorkspaceFlags(fs)
	kind := fs.String("kind", "", "only runs of this kind: train, quantize, pull, decide, tao")
	limit := fs.Int("limit", 50, "most runs to list")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: inloop runs [flags]\n       inloop runs show ID\n       inloop runs resume ID\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	rest := fs.Args()
	if len(rest) == 0 {
		runs, err := w.Store.Runs(e.ctx, store.RunFilter{Kind: store.RunKind(*kind), Limit: *limit})
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			fmt.Fprintln(stdout, "No runs yet. Start one with inloop train, quantize or pull.")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tMODEL\tSTARTED\tTOOK\tRESULT")
		for _, r := range runs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Status, r.Model, when(r.Created), took(r), summary(r))
		}
		return tw.Flush()
	}
	if len(rest) != 2 {
		fs.Usage()
		return errors.New("runs takes no argument, or show ID, or resume ID")
	}
	id, err := strconv.ParseInt(rest[1], 10, 64)
	if err != nil {
		return fmt.Errorf("run id %q is not a number", rest[1])
	}
	switch rest[0] {
	case "show":
		return showRun(e, w, id)
	case "resume":
		job, err := w.Resume(e.ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Resuming run %d (%s)\n", id, job.Kind)
		for p := range job.Events {
			printProgress(stdout, stderr, p)
		}
		return job.Wait()
	}
	fs.Usage()
	return fmt.Errorf("unknown runs subcommand %q", rest[0])
}

func showRun(e *env, w *Workspace, id int64) error {
	r, err := w.Store.Run(e.ctx, id)
	if err != nil {
		return err
	}
	out := e.stdout
	fmt.Fprintf(out, "Run %d: %s of %s, %s\n", r.ID, r.Kind, r.Model, r.Status)
	fmt.Fprintf(out, "  created  %s\n", when(r.Created))
	if !r.Started.IsZero() {
		fmt.Fprintf(out, "  started  %s\n", when(r.Started))
	}
	if !r.Finished.IsZero() {
		fmt.Fprintf(out, "  finished %s (%s)\n", when(r.Finished), took(r))
	}
	if r.Dataset != "" {
		fmt.Fprintf(out, "  data     %s\n", r.Dataset)
	}
	if r.Output != "" {
		fmt.Fprintf(out, "  output   %s\n", r.Output)
	}
	if r.Error != "" {
		fmt.Fprintf(out, "  error    %s\n", termsafe.String(r.Error))
	}
	if r.Status == store.StatusInterrupted || r.Status == store.StatusFailed || r.Status == store.StatusCancelled {
		fmt.Fprintf(out, "  continue with: inloop runs resume %d\n", r.ID)
	}
	printJSON(out, "parameters", r.Params)
	printJSON(out, "result", r.Result)
	names, err := w.Store.MetricNames(e.ctx, id)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		fmt.Fprintln(out, "metrics:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tPOINTS\tFIRST\tMIN\tMAX\tLAST (STEP)")
		for _, n := range names {
			ms, err := w.Store.Metrics(e.ctx, id, n)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				continue
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, m := range ms {
				lo, hi = math.Min(lo, m.Value), math.Max(hi, m.Value)
			}
			last := ms[len(ms)-1]
			fmt.Fprintf(tw, "  %s\t%d\t%.4g\t%.4g\t%.4g\t%.4g (%d)\n", n, len(ms), ms[0].Value, lo, hi, last.Value, last.Step)
		}
		tw.Flush()
	}
	cks, err := w.Store.Checkpoints(e.ctx, id)
	if err == nil && len(cks) > 0 {
		fmt.Fprintf(out, "checkpoints: %d, newest step %d at %s\n", len(cks), cks[len(cks)-1].Step, cks[len(cks)-1].Path)
	}
	return nil
}

func printJSON(out io.Writer, title string, raw json.RawMessage) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil {
		fmt.Fprintf(out, "%s: %s\n", title, raw)
		return
	}
	pretty, _ := json.MarshalIndent(v, "  ", "  ")
	fmt.Fprintf(out, "%s:\n  %s\n", title, pretty)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

func took(r store.Run) string {
	if r.Started.IsZero() {
		return "-"
	}
	end := r.Finished
	if end.IsZero() {
		if r.Status != store.StatusRunning {
			return "-"
		}
		end = time.Now()
	}
	return end.Sub(r.Started).Round(time.Second).String()
}

// summary is a run's headline figure for the list.
func summary(r store.Run) string {
	if r.Error != "" && r.Status != store.StatusDone {
		msg := r.Error
		if len(msg) > 60 {
			msg = msg[:57] + "..."
		}
		return msg
	}
	var v map[string]any
	if json.Unmarshal(r.Result, &v) != nil {
		return ""
	}
	num := func(k string) (float64, bool) { f, ok := v[k].(float64); return f, ok }
	switch r.Kind {
	case store.KindTrain:
		s := ""
		if n, ok := num("steps"); ok {
			s = fmt.Sprintf("%d steps", int(n))
		}
		if l, ok := num("train_loss"); ok {
			s += fmt.Sprintf(", train loss %.3f", l)
		}
		if l, ok := num("val_loss"); ok {
			s += fmt.Sprintf(", val %.3f", l)
		}
		return s
	case store.KindQuantize:
		b, _ := num("PerplexityBefore")
		a, _ := num("PerplexityAfter")
		return fmt.Sprintf("ppl %.2f -> %.2f", b, a)
	case store.KindPull:
		n, _ := num("bytes")
		return fmt.Sprintf("%.1f MB", n/1e6)
	}
	return ""
}
