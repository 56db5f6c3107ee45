package app

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

func init() {
	register(command{name: "tax", summary: "measure the KV-cache tax: worked examples in the prompt against the same examples learned", run: taxCmd})
}

func taxCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("tax", stderr)
	wf := addWorkspaceFlags(fs)
	model := fs.String("model", "demo", "model: demo, a folder, a pulled ORG/NAME or a remembered name")
	question := fs.String("question", "team", "question of the bundled support-ticket task")
	shots := fs.String("shots", "0,4,16,64", "numbers of worked examples to compare")
	eval := fs.Int("eval", 40, "held-out tickets scored")
	steps := fs.Int("steps", 40, "LoRA updates the adapted side trains on the examples")
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec := TaxSpec{Model: *model, Question: *question, Eval: *eval, Steps: *steps}
	for _, s := range strings.Split(*shots, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("--shots %q: want numbers like 0,4,16,64", *shots)
		}
		spec.Shots = append(spec.Shots, n)
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	rows, err := w.TaxReport(e.ctx, spec, func(s string) { fmt.Fprintln(stderr, s+"…") })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "The KV-cache tax on %s, question %q, %d held-out tickets:\n\n", *model, spec.Question, spec.Eval)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "examples\tprompt tokens\tKV cache\tfirst token\tdecode\taccuracy\t│\tKV cache\tfirst token\tdecode\taccuracy\ttraining\t")
	fmt.Fprintln(tw, "\tin the prompt\t\t\t\t\t│\tlearned (LoRA)\t\t\t\t\t")
	for _, r := range rows {
		ic, ad := r.InContext, r.Adapted
		left := fmt.Sprintf("%d\t%d\t%s\t%s\t%.0f tok/s\t%.0f%%\t", r.Shots, ic.PromptTokens, FormatBytes(ic.KVBytes), msText(ic.TTFT.Seconds()*1000), ic.DecodeTPS, 100*ic.Accuracy)
		if !ic.Fits {
			left = fmt.Sprintf("%d\t%d\tdoes not fit the context\t\t\t\t", r.Shots, ic.PromptTokens)
		}
		right := fmt.Sprintf("%s\t%s\t%.0f tok/s\t%.0f%%\t%s\t", FormatBytes(ad.KVBytes), msText(ad.TTFT.Seconds()*1000), ad.DecodeTPS, 100*ad.Accuracy, msText(ad.TrainDuration.Seconds()*1000))
		fmt.Fprintln(tw, left+"│\t"+right)
	}
	return tw.Flush()
}

func msText(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}
