package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/inloop/inloop/adapt/deltamem"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/training/trainer"
)

func init() {
	register(command{name: "memory", summary: "δ-mem, a chat's online memory: 'memory train' for a model, 'memory inspect', 'memory reset' and 'memory undo' for a chat", run: memoryCmd})
}

func memoryCmd(e *env, args []string) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, `Usage: inloop memory train --model NAME [--data DIR] [--steps N] [--rank R] [--out FILE]
       inloop memory inspect --chat ID | --model NAME
       inloop memory reset --chat ID
       inloop memory undo --chat ID
A chat uses the memory with: inloop chat --model NAME --memory [--memory-from CHAT]
Run 'inloop memory SUBCOMMAND -h' for its flags.`)
	}
	if len(args) == 0 {
		usage(e.stderr)
		return errors.New("memory needs a subcommand: train, inspect, reset or undo")
	}
	switch args[0] {
	case "train":
		return memoryTrainCmd(e, args[1:])
	case "inspect":
		return memoryInspectCmd(e, args[1:])
	case "reset", "undo":
		return memoryChangeCmd(e, args[0], args[1:])
	case "-h", "--help", "help":
		usage(e.stdout)
		return nil
	}
	usage(e.stderr)
	return fmt.Errorf("unknown memory subcommand %q", args[0])
}

func memoryTrainCmd(e *env, args []string) error {
	fs := newFlags("memory train", e.stderr)
	wf := addWorkspaceFlags(fs)
	model := fs.String("model", "demo", "model: demo, a folder, a pulled ORG/NAME or a remembered name")
	dataDir := fs.String("data", "", "a folder of documents to build the recall task from; empty: the bundled sample tickets")
	steps := fs.Int("steps", deltamem.DefaultSteps, "optimizer steps")
	batch := fs.Int("batch", deltamem.DefaultBatch, "sessions per step")
	lr := fs.Float64("lr", deltamem.DefaultLearningRate, "learning rate")
	rank := fs.Int("rank", deltamem.DefaultRank, "side of each layer's state")
	seed := fs.Uint64("seed", 1, "seed of the projections and of the sessions drawn")
	out := fs.String("out", "", "the memory file; empty: deltamem.safetensors in the model's folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	spec := MemoryTrainSpec{Model: *model, Data: *dataDir, Out: *out, Options: deltamem.TrainOptions{Steps: *steps, Batch: *batch,
		LearningRate: *lr, Seed: *seed, Config: deltamem.Config{Rank: *rank}}}
	rep, err := w.TrainMemory(e.ctx, spec, func(ev trainer.Event) {
		if ev.Kind == trainer.EventTrain && (ev.Step == 1 || ev.Step%25 == 0 || ev.Step == ev.Iters) {
			fmt.Fprintf(e.stderr, "step %d/%d  loss %.3f  eta %s\n", ev.Step, ev.Iters, ev.Loss, ev.ETA.Round(1e9))
		}
	})
	if err != nil {
		return err
	}
	var stepMS float64
	for _, s := range rep.Result.Steps {
		stepMS += s.MS
	}
	r := rep.Recall
	fmt.Fprintf(e.stdout, "saved %s: %d parameters (%.2f%% of the model), %d steps on %d documents, %.0f ms per step\n",
		rep.Path, rep.Result.Params, 100*rep.Result.Fraction, len(rep.Result.Steps), rep.Documents, stepMS/float64(max(1, len(rep.Result.Steps))))
	fmt.Fprintf(e.stdout, "recall on %d held-out answer tokens, the passage out of the window:\n", r.With.Tokens)
	fmt.Fprintf(e.stdout, "  without the memory  %5.1f%%  (%.2f nats/token)\n", 100*r.Without.Accuracy, r.Without.NLL)
	fmt.Fprintf(e.stdout, "  with the memory     %5.1f%%  (%.2f nats/token)\n", 100*r.With.Accuracy, r.With.NLL)
	fmt.Fprintf(e.stdout, "  memory, other text  %5.1f%%  (%.2f nats/token)\n", 100*r.Control.Accuracy, r.Control.NLL)
	fmt.Fprintf(e.stdout, "  passage in window   %5.1f%%  (%.2f nats/token)\n", 100*r.InWindow.Accuracy, r.InWindow.NLL)
	fmt.Fprintf(e.stdout, "  in window + memory  %5.1f%%  (%.2f nats/token)\n", 100*r.InWindowWith.Accuracy, r.InWindowWith.NLL)
	return nil
}

func memoryInspectCmd(e *env, args []string) error {
	fs := newFlags("memory inspect", e.stderr)
	wf := addWorkspaceFlags(fs)
	chat := fs.Int64("chat", 0, "the chat whose memory to describe")
	model := fs.String("model", "", "describe this model's trained memory instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*chat == 0) == (*model == "") {
		return errors.New("memory inspect needs --chat ID or --model NAME")
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	if *model != "" {
		m, info, err := w.SharedModel(e.ctx, *model)
		if err != nil {
			return err
		}
		path := deltamem.DefaultPath(info.Path)
		mem, err := deltamem.Load(path, m)
		if err != nil {
			return fmt.Errorf("%w for %s: %w", ErrNoMemory, info.Name, err)
		}
		fmt.Fprintf(e.stdout, "%s: rank %d on layers %v, %d parameters (%.2f%% of the model's %d)\n", path, mem.Rank(), mem.Layers(),
			mem.NumParams(), 100*float64(mem.NumParams())/float64(modelParams(m)), modelParams(m))
		return nil
	}
	info, err := w.ChatMemoryInfo(e.ctx, *chat)
	if err != nil {
		return err
	}
	norms := make([]string, len(info.LayerNorms))
	for i, n := range info.LayerNorms {
		norms[i] = fmt.Sprintf("%d:%.3g", info.Layers[i], n)
	}
	fmt.Fprintf(e.stdout, "chat %d memory, version %d (kept: %v)\n  file   %s\n  state  rank %d, %d layers\n  writes %d positions\n  norm   %.4g (per layer %s)\n",
		info.ChatID, info.Version, info.Versions, info.File, info.Rank, len(info.Layers), info.Writes, info.Norm, strings.Join(norms, " "))
	return nil
}

func memoryChangeCmd(e *env, op string, args []string) error {
	fs := newFlags("memory "+op, e.stderr)
	wf := addWorkspaceFlags(fs)
	chat := fs.Int64("chat", 0, "the chat")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chat == 0 {
		return fmt.Errorf("memory %s needs --chat ID", op)
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	if op == "reset" {
		if err := w.ResetChatMemory(e.ctx, *chat); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "chat %d's memory is empty (memory undo --chat %d brings it back)\n", *chat, *chat)
		return nil
	}
	v, err := w.UndoChatMemory(e.ctx, *chat)
	if err != nil {
		return err
	}
	if v == 0 {
		fmt.Fprintf(e.stdout, "chat %d has no memory version left\n", *chat)
	} else {
		fmt.Fprintf(e.stdout, "chat %d's memory is version %d again\n", *chat, v)
	}
	return nil
}

func modelParams(m *inference.Model) int {
	n := 0
	for _, a := range m.Params() {
		n += a.Size()
	}
	return n
}

// memoryFlags are the chat command's δ-mem flags.
type memoryFlags struct {
	on   *bool
	from *int64
	file *string
}

func addMemoryFlags(fs *flag.FlagSet) memoryFlags {
	return memoryFlags{
		on:   fs.Bool("memory", false, "use the model's trained δ-mem memory (inloop memory train): it keeps what the context drops, stored with the chat"),
		from: fs.Int64("memory-from", 0, "start the memory from the one stored for this chat (implies --memory)"),
		file: fs.String("memory-file", "", "the trained memory; empty: deltamem.safetensors in the model's folder (implies --memory)"),
	}
}

func (f memoryFlags) spec() *ChatMemory {
	if !*f.on && *f.from == 0 && *f.file == "" {
		return nil
	}
	return &ChatMemory{File: *f.file, From: *f.from}
}
