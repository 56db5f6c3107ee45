package app

import (
	"errors"
	"fmt"

	"github.com/inloop/inloop/inference/hub"
)

func init() {
	register(command{name: "pull", summary: "download a model from Hugging Face (the only command that uses the network)", run: pull})
}

func pull(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("pull", stderr)
	wf := addWorkspaceFlags(fs)
	dest := fs.String("dir", "", "destination folder (default <data-dir>/models/ORG--NAME)")
	endpoint := fs.String("endpoint", "", "hub URL (default $HF_ENDPOINT or "+hub.DefaultEndpoint+")")
	revision := fs.String("revision", "main", "branch, tag or commit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: inloop pull [flags] ORG/NAME\n\nDownloads config, tokenizer and safetensors files; an interrupted pull resumes.\nA token for gated models is read from $HF_TOKEN.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("pull takes one ORG/NAME")
	}
	repo := fs.Arg(0)
	if err := hub.ValidateRepo(repo); err != nil {
		return err
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	job, err := w.StartPull(e.ctx, PullSpec{Repo: repo, Revision: *revision, Endpoint: *endpoint, Dir: *dest})
	if err != nil {
		return err
	}
	for p := range job.Events {
		printProgress(stdout, stderr, p)
	}
	if err := job.Wait(); err != nil {
		if e.ctx.Err() != nil {
			return fmt.Errorf("interrupted; run the same command again (or inloop runs resume %d) to resume: %w", job.RunID, err)
		}
		return err
	}
	r, _ := w.Store.Run(e.ctx, job.RunID)
	fmt.Fprintf(stdout, "%s is in %s\n", repo, r.Output)
	return nil
}
