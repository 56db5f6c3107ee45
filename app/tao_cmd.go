package app

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/inloop/inloop/internal/termsafe"
)

func init() {
	register(command{name: "tao", summary: "improve a model's adapter on its chats' prompts, scored by a local reward (tao undo ID takes a round back)", run: taoCmd})
}

func taoCmd(e *env, args []string) error {
	if len(args) > 0 && args[0] == "undo" {
		return taoUndoCmd(e, args[1:])
	}
	fs := newFlags("tao", e.stderr)
	wf := addWorkspaceFlags(fs)
	var spec TAOSpec
	fs.StringVar(&spec.Model, "model", "demo", "model: demo, a folder, a pulled ORG/NAME or a remembered name")
	fs.StringVar(&spec.Prompts, "prompts", "", "a prompt file (a prompt per line, or JSONL with \"prompt\"), beside the chats' prompts")
	fs.BoolVar(&spec.NoChats, "no-chats", false, "use only the prompt file, not the prompts of the model's chats")
	fs.StringVar(&spec.Format, "format", "", "a regular expression answers must match: the reward, instead of judge + feedback history + checks")
	fs.StringVar(&spec.Judge, "judge", JudgeAuto, "auto (train one on the thumbs history), off, or a decision-model folder")
	fs.StringVar(&spec.System, "system", "", "the system prompt the chats use")
	fs.IntVar(&spec.Candidates, "n", 0, "candidates per prompt (default 4)")
	fs.IntVar(&spec.MaxTokens, "max-tokens", 0, "longest candidate (default 48)")
	fs.Float64Var(&spec.Heldout, "heldout", 0, "share of prompts held out for the check (default 0.25)")
	fs.IntVar(&spec.EvalSamples, "eval-samples", 0, "answers per held-out prompt, before and after (default 4)")
	fs.IntVar(&spec.Epochs, "epochs", 0, "passes over the best candidates (default 3)")
	fs.Float64Var(&spec.LearningRate, "learning-rate", 0, "the adapter's learning rate (default 5e-4)")
	fs.Float64Var(&spec.Preference, "preference", 0, "weight of the preference (DPO) loss between best and worst; 0 is best-of-n alone")
	fs.Float64Var(&spec.MinGain, "min-gain", 0, "least held-out reward gain that keeps the adapter (default 0.01)")
	seed := fs.Uint64("seed", 1, "seed of the split, the sampling and the training order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec.Seed = *seed
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	job, err := w.StartTAO(e.ctx, spec)
	if err != nil {
		return err
	}
	for p := range job.Events {
		if p.Phase != PhaseDone {
			printProgress(e.stdout, e.stderr, p)
		}
	}
	werr := job.Wait()
	var rep TAOReport
	if raw := job.Result(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &rep)
	}
	if werr != nil {
		return werr
	}
	printTAOReport(e, rep)
	return nil
}

func printTAOReport(e *env, r TAOReport) {
	out := e.stdout
	fmt.Fprintf(out, "\nTAO round (event %d), reward %s:\n", r.EventID, termsafe.String(r.Reward))
	tw := newTable(out)
	fmt.Fprintf(tw, "prompts\t%d from chats, %d from the file: %d to train on, %d held out\n", r.ChatPrompts, r.FilePrompts, r.TrainPrompts, r.HeldoutPrompts)
	if r.Judge != "" {
		fmt.Fprintf(tw, "judge\t%s\n", termsafe.String(r.Judge))
	}
	fmt.Fprintf(tw, "candidates\t%d (mean reward %.3f), best of each prompt trained on for %d prompts (mean %.3f)\n", r.Candidates, r.MeanReward, r.Trained, r.BestReward)
	if r.Check.Prompts > 0 {
		fmt.Fprintf(tw, "held-out reward\t%.3f -> %.3f (%+.3f ± %.3f, %d prompts × %d answers)\n", r.Check.Before, r.Check.After, r.Check.Gain, r.Check.StdErr, r.Check.Prompts, r.Check.Samples)
	}
	fmt.Fprintf(tw, "time\t%s in all: generation %.1f ms a candidate, scoring %.2f ms a candidate, %d training steps of %.0f ms, check %s\n",
		msText(r.TotalMS), r.PerCandidateMS, r.ScorePerCandidateMS, len(r.Steps), r.StepMS, msText(r.CheckMS))
	tw.Flush()
	fmt.Fprintln(out, termsafe.String(r.Reason)+".")
	if r.Kept {
		fmt.Fprintf(out, "Adapter version %d saved to %s (undo: inloop tao undo %d)\n", r.Version, r.AdapterPath, r.EventID)
	}
}

func taoUndoCmd(e *env, args []string) error {
	fs := newFlags("tao undo", e.stderr)
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("tao undo: give the event id of a TAO round (inloop tao prints it)")
	}
	id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("tao undo: %q is not an event id", fs.Arg(0))
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	a, err := w.UndoTAO(e.ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "TAO round %d undone: adapter version %d of %s is the one before it (%s)\n", id, a.Version, a.Model, a.Path)
	return nil
}
