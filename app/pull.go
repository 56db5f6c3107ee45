package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/inloop/inloop/inference/hub"
)

func init() {
	register(command{name: "pull", summary: "download a model from Hugging Face (the only command that uses the network)", run: pull})
}

func pull(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", stderr)
	dataDir := fs.String("data-dir", "", "Inloop's data directory (default $INLOOP_HOME or the user config dir)")
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
	dir := *dest
	if dir == "" {
		dd, err := DataDir(*dataDir)
		if err != nil {
			return err
		}
		dir = modelDir(dd, repo)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var last time.Time
	err := hub.Pull(ctx, hub.PullOptions{
		Endpoint: *endpoint, Repo: repo, Revision: *revision, Dir: dir, Token: os.Getenv("HF_TOKEN"),
		Progress: func(file string, done, total int64) {
			if now := time.Now(); now.Sub(last) > 500*time.Millisecond || done == total {
				last = now
				fmt.Fprintf(stdout, "\r%-48s %8.1f / %.1f MB", file, float64(done)/1e6, float64(total)/1e6)
				if done == total {
					fmt.Fprintln(stdout)
				}
			}
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted; run the same command again to resume: %w", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s is in %s\n", repo, dir)
	return nil
}
