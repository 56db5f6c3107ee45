package app

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inloop/inloop/adapt/deltamem"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/store"
)

// TestChatMemoryLifecycle: a memory trained for a model is used by a chat
// whose every reply stores a new version of the state with an adaptation
// event; reset and undo are versions too; the state survives closing the
// workspace and starts a new chat where the old one left off; a chat without
// the option replies as it did before any memory was trained.
func TestChatMemoryLifecycle(t *testing.T) {
	ctx := context.Background()
	dir, model := t.TempDir(), tinyModelDir(t)
	w := openTestWorkspace(t, dir)
	greedy := inference.SampleOptions{Temperature: 0}

	plainReply := func(w *Workspace) Turn {
		t.Helper()
		c, err := w.StartChat(ctx, ChatSpec{Model: model, MaxTokens: 6, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		turn, err := c.Send(ctx, "the door code is 4417", nil)
		if err != nil {
			t.Fatal(err)
		}
		return turn
	}
	before := plainReply(w)
	if _, err := w.StartChat(ctx, ChatSpec{Model: model, Memory: &ChatMemory{}}); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("a chat with memory before one was trained: %v, want ErrNoMemory", err)
	}
	rep, err := w.TrainMemory(ctx, MemoryTrainSpec{Model: model, Options: deltamem.TrainOptions{Steps: 3, Batch: 2,
		Task: deltamem.Task{Fact: 12, Filler: 4, Cue: 3, Answer: 3}}, Eval: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Path != filepath.Join(model, deltamem.FileName) || len(rep.Result.Steps) != 3 {
		t.Fatalf("trained %s in %d steps", rep.Path, len(rep.Result.Steps))
	}
	if _, err := os.Stat(rep.Path); err != nil {
		t.Fatal(err)
	}

	c, err := w.StartChat(ctx, ChatSpec{Model: model, MaxTokens: 4, Sampling: greedy, Memory: &ChatMemory{}})
	if err != nil {
		t.Fatal(err)
	}
	t1, err := c.Send(ctx, "the door code is 4417", nil)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Memory == nil || t1.Memory.Version != 1 || t1.Memory.Writes == 0 || !(t1.Memory.Norm > 0) {
		t.Fatalf("first turn's memory: %+v", t1.Memory)
	}
	if t1.Stats.PromptTokens != before.Stats.PromptTokens || t1.Stats.KVBytes > before.Stats.KVBytes {
		t.Fatalf("with the memory the prompt took %d tokens and the cache %d bytes; without, %d and %d: the memory must add none",
			t1.Stats.PromptTokens, t1.Stats.KVBytes, before.Stats.PromptTokens, before.Stats.KVBytes)
	}
	c.Reset() // the KV cache and the conversation go; the memory stays
	t2, err := c.Send(ctx, "what is the code?", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := c.MemoryInfo()
	if !ok || info.Version != 2 || info.Writes != t1.Memory.Writes+t2.Memory.Writes {
		t.Fatalf("after two turns: %+v", info)
	}
	events, err := w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: c.ID, Method: store.MethodDeltaMem})
	if err != nil || len(events) != 2 || events[0].VersionBefore != 1 || events[0].VersionAfter != 2 {
		t.Fatalf("events %+v, %v", events, err)
	}

	if err := c.ResetMemory(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.MemoryInfo(); info.Writes != 0 || info.Norm != 0 || info.Version != 3 {
		t.Fatalf("after reset: %+v", info)
	}
	if err := c.UndoMemory(ctx); err != nil {
		t.Fatal(err)
	}
	back, _ := c.MemoryInfo()
	if back.Version != 2 || back.Writes != info.Writes || back.Norm != info.Norm {
		t.Fatalf("after undo: %+v, want %+v", back, info)
	}
	w.Close()

	// A new run of the app: the stored state is the chat's memory, and a new
	// chat continues from it.
	w = openTestWorkspace(t, dir)
	defer w.Close()
	stored, err := w.ChatMemoryInfo(ctx, c.ID)
	if err != nil || stored.Version != 2 || stored.Writes != back.Writes || stored.Norm != back.Norm || !slices.Equal(stored.Versions, []int{2, 1}) {
		t.Fatalf("stored after restart: %+v, %v", stored, err)
	}
	c2, err := w.StartChat(ctx, ChatSpec{Model: model, MaxTokens: 4, Sampling: greedy, Memory: &ChatMemory{From: c.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := c2.MemoryInfo(); info.Writes != stored.Writes || info.Norm != stored.Norm || info.Version != 1 {
		t.Fatalf("continued memory: %+v, want the stored %+v as version 1", info, stored)
	}

	// The CLI over the same store.
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"inspect", "--chat"}, {"reset", "--chat"}, {"undo", "--chat"}} {
		out.Reset()
		args = append(append([]string{"memory"}, args...), strconv.FormatInt(c.ID, 10), "--data-dir", dir, "--backend", "cpu")
		if code := Main(args, &out, &errb); code != 0 {
			t.Fatalf("%v exited %d: %s", args, code, errb.String())
		}
	}
	if !strings.Contains(out.String(), "version 2 again") {
		t.Fatalf("undo said %q", out.String())
	}

	// Without the option, a chat is what it was before any memory existed.
	if after := plainReply(w); after.Memory != nil || after.Text != before.Text {
		t.Fatalf("plain chat after training a memory: %q (memory %+v), before: %q", after.Text, after.Memory, before.Text)
	}
}
