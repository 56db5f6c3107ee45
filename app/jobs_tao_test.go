package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/lora"
)

// taoPrompts are 24 questions in the demo model's world.
func taoPrompts() []string {
	var out []string
	for _, f := range []string{"What is %s?", "Tell me about %s.", "Who needs %s?"} {
		for _, t := range []string{"a hacker", "a kludge", "the bazaar", "a daemon", "a wizard", "a bug", "Unix", "a guru"} {
			out = append(out, fmt.Sprintf(f, t))
		}
	}
	return out
}

// taoAttribution is a known format: the answer ends with a fortune's
// attribution line, which the demo model writes now and then.
const taoAttribution = `\n\s*-- ?\S[^\n]*$`

// chatsWith stores two chats with the demo model holding prompts as the
// user's messages, each answered.
func chatsWith(t *testing.T, w *Workspace, prompts []string) []int64 {
	t.Helper()
	ctx := context.Background()
	var replies []int64
	for c := range 2 {
		id, err := w.Store.CreateChat(ctx, store.Chat{Title: fmt.Sprintf("chat %d", c), Model: DemoModelName})
		if err != nil {
			t.Fatal(err)
		}
		for i := c; i < len(prompts); i += 2 {
			if _, err := w.Store.AddMessage(ctx, store.Message{ChatID: id, Role: "user", Content: prompts[i]}); err != nil {
				t.Fatal(err)
			}
			r, err := w.Store.AddMessage(ctx, store.Message{ChatID: id, Role: "assistant", Content: "reply to " + prompts[i]})
			if err != nil {
				t.Fatal(err)
			}
			replies = append(replies, r)
		}
	}
	return replies
}

func runTAO(t *testing.T, w *Workspace, spec TAOSpec) (TAOReport, []Progress) {
	t.Helper()
	job, err := w.StartTAO(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var events []Progress
	for p := range job.Events {
		events = append(events, p)
	}
	if err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	var rep TAOReport
	if err := json.Unmarshal(job.Result(), &rep); err != nil {
		t.Fatal(err)
	}
	run, err := w.Store.Run(context.Background(), job.RunID)
	if err != nil || run.Kind != store.KindTAO || run.Status != store.StatusDone {
		t.Fatalf("run %+v, %v: want a done tao run", run, err)
	}
	return rep, events
}

func folderHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	for _, f := range []string{lora.AdaptersFile, lora.ConfigFile} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(raw)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestTAOJob: a round on the chats' prompts with a known reward keeps a new
// adapter version, recorded with its run and event; undo makes the model
// compute as before it; a round with a reward that cannot tell answers apart
// leaves the latest version, file for file, as it was.
func TestTAOJob(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	chatsWith(t, w, taoPrompts())

	rep, events := runTAO(t, w, TAOSpec{Model: "demo", Format: taoAttribution, Candidates: 8, MaxTokens: 32, EvalSamples: 4, Seed: 1})
	t.Logf("%s (%d candidates, %.1f ms each)", rep.Reason, rep.Candidates, rep.PerCandidateMS)
	if !rep.Kept || rep.Version != 1 || rep.ChatPrompts != 24 || !(rep.Check.After > rep.Check.Before) {
		t.Fatalf("report %+v: want a kept round, adapter version 1, 24 prompts from the chats", rep)
	}
	trained := 0
	for _, p := range events {
		if p.Phase == PhaseTrain {
			trained++
		}
	}
	if trained != len(rep.Steps) || trained == 0 {
		t.Errorf("%d training events for %d steps", trained, len(rep.Steps))
	}
	a, err := w.Store.LatestAdapter(ctx, DemoModelName)
	if err != nil || a.Version != 1 || a.Path != rep.AdapterPath || a.Name != "TAO" {
		t.Fatalf("latest adapter %+v, %v", a, err)
	}
	ev, err := w.Store.AdaptationEvent(ctx, rep.EventID)
	if err != nil || ev.Method != store.MethodTAO || ev.VersionBefore != 0 || ev.VersionAfter != 1 || ev.MS <= 0 {
		t.Fatalf("event %+v, %v", ev, err)
	}

	// Undo: version 2 computes what the bare model does.
	u, err := w.UndoTAO(ctx, rep.EventID)
	if err != nil || u.Version != 2 {
		t.Fatalf("undo: %+v, %v", u, err)
	}
	base, _, err := w.SharedModel(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	undone := base.Fork()
	if _, err := inference.LoadAdapter(undone, u.Path); err != nil {
		t.Fatal(err)
	}
	ids := []int{10, 20, 30, 40, 50}
	want, _ := base.Forward(mustTokens(t, base, ids), nil).Float32s()
	got, _ := undone.Forward(mustTokens(t, undone, ids), nil).Float32s()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d after undo %v, bare model %v", i, got[i], want[i])
		}
	}
	if ev, _ := w.Store.AdaptationEvent(ctx, rep.EventID); !ev.Undone {
		t.Error("the round's event is not marked undone")
	}
	if _, err := w.UndoTAO(ctx, rep.EventID); err == nil || !strings.Contains(err.Error(), "already undone") {
		t.Errorf("second undo: %v", err)
	}

	// A reward that matches every answer is constant: nothing is learnt.
	hash := folderHash(t, u.Path)
	rep2, _ := runTAO(t, w, TAOSpec{Model: "demo", Format: "^", MaxTokens: 16, EvalSamples: 2, Seed: 2})
	if rep2.Kept || rep2.Version != 2 || len(rep2.Steps) != 0 || !strings.Contains(rep2.Reason, "does not tell the candidates apart") {
		t.Fatalf("constant reward: %+v", rep2)
	}
	if a, _ := w.Store.LatestAdapter(ctx, DemoModelName); a.Version != 2 || folderHash(t, a.Path) != hash {
		t.Fatalf("constant reward: latest adapter version %d changed", a.Version)
	}
	if ev, _ := w.Store.AdaptationEvent(ctx, rep2.EventID); ev.VersionBefore != 2 || ev.VersionAfter != 2 {
		t.Errorf("constant reward's event: versions %d -> %d, want 2 -> 2", ev.VersionBefore, ev.VersionAfter)
	}
	if _, err := w.UndoTAO(ctx, rep2.EventID); err == nil || !strings.Contains(err.Error(), "nothing to undo") {
		t.Errorf("undo of a round that kept nothing: %v", err)
	}
}

func mustTokens(t *testing.T, m *inference.Model, ids []int) *mx.Array {
	t.Helper()
	a, err := m.Tokens(ids)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTAOHistoryFromChats(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	prompts := taoPrompts()[:4]
	replies := chatsWith(t, w, prompts)
	other, _ := w.Store.CreateChat(ctx, store.Chat{Title: "another model", Model: "elsewhere"})
	w.Store.AddMessage(ctx, store.Message{ChatID: other, Role: "user", Content: "not this model's"})
	w.AddFeedback(ctx, replies[0], 1, "")
	w.AddFeedback(ctx, replies[1], -1, "")
	w.AddFeedback(ctx, replies[1], -1, "a better reply") // the latest word counts
	got, err := w.chatPrompts(ctx, DemoModelName)
	if err != nil || len(got) != 4 {
		t.Fatalf("chat prompts %q, %v; want the 4 of the demo's chats", got, err)
	}
	rated, err := w.ratedReplies(ctx, DemoModelName)
	if err != nil || len(rated) != 2 {
		t.Fatalf("rated %+v, %v", rated, err)
	}
	var down bool
	for _, r := range rated {
		if r.Thumb == -1 {
			down = r.Correction == "a better reply" && r.Answer == "reply to "+r.Prompt
		}
	}
	if !down {
		t.Errorf("rated %+v: the thumb down and its correction are missing", rated)
	}
}

func TestTAOCommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(file, []byte(strings.Join(taoPrompts()[:8], "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	data := filepath.Join(dir, "data")
	if code := Main([]string{"tao", "--data-dir", data, "--backend", "cpu", "--no-chats", "--prompts", file, "--format", "^", "--max-tokens", "8", "--eval-samples", "1"}, &out, &errb); code != 0 {
		t.Fatalf("tao: exit %d: %s", code, errb.String())
	}
	if s := out.String(); !strings.Contains(s, "0 from chats, 8 from the file") || !strings.Contains(s, "the adapter is unchanged") {
		t.Errorf("output:\n%s", s)
	}
	errb.Reset()
	if code := Main([]string{"tao", "undo", "--data-dir", data, "1"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "nothing to undo") {
		t.Errorf("undo of a round that kept nothing: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := Main([]string{"tao", "--data-dir", data, "--format", "(unclosed"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "format") {
		t.Errorf("a broken format: exit %d, %s", code, errb.String())
	}
}

func TestTAOCancel(t *testing.T) {
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	chatsWith(t, w, taoPrompts()[:8])
	job, err := w.StartTAO(context.Background(), TAOSpec{Model: "demo", Format: taoAttribution, MaxTokens: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range job.Events {
		job.Cancel()
	}
	if err := job.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	run, _ := w.Store.Run(context.Background(), job.RunID)
	if run.Status != store.StatusCancelled {
		t.Errorf("run status %s, want cancelled", run.Status)
	}
	if _, err := w.Store.LatestAdapter(context.Background(), DemoModelName); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a cancelled round left an adapter: %v", err)
	}
}
