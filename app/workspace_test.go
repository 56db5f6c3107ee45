package app

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/adapt/ttt"
	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/store"
)

func openTestWorkspace(t *testing.T, dir string) *Workspace {
	t.Helper()
	w, err := Open(context.Background(), Options{DataDir: dir, Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func tinyData(t *testing.T) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data.jsonl")
	rows := `{"text": "the cat sat on the mat"}
{"text": "a dog ran in the park"}
{"text": "hello world, hello again"}
`
	if err := os.WriteFile(data, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// tinyTrainSpec trains the tiny model for iters steps, reporting and saving
// every report and save steps.
func tinyTrainSpec(t *testing.T, iters, report, save int) TrainSpec {
	spec := TrainSpec{}
	spec.Model, spec.Data = tinyModelDir(t), tinyData(t)
	spec.Iters, spec.BatchSize, spec.LearningRate, spec.NumLayers, spec.Rank = iters, 2, 1e-3, 1, 2
	spec.StepsPerReport, spec.SaveEvery, spec.Seed = report, save, 1
	return spec
}

func TestRegistryResolvesNamesTheSameWay(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	demo, err := w.ResolveModel(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if demo.Source != "demo" || demo.Architecture != "llama" || demo.Params < 2_000_000 || demo.Params > 3_000_000 {
		t.Errorf("demo model registered as %+v", demo)
	}
	folder := tinyModelDir(t)
	m, err := w.ResolveModel(ctx, folder)
	if err != nil {
		t.Fatal(err)
	}
	// Remembered: its name now resolves to the same folder, in any later workspace.
	again, err := w.ResolveModel(ctx, m.Name)
	if err != nil || again.Path != m.Path {
		t.Errorf("name %q resolved to %+v, %v; want %s", m.Name, again, err, m.Path)
	}
	models, err := w.Models(ctx)
	if err != nil || len(models) != 2 {
		t.Errorf("models: %d, %v; want the demo and the folder", len(models), err)
	}
	for _, bad := range []string{"no-such-model", "org/not-pulled", filepath.Join(t.TempDir(), "empty")} {
		if _, err := w.ResolveModel(ctx, bad); !errors.Is(err, ErrUnknownModel) {
			t.Errorf("ResolveModel(%q): %v, want ErrUnknownModel", bad, err)
		}
	}
}

// A training job streams its progress, records its run with metrics, a
// checkpoint and the adapter, and the CLI lists it.
func TestTrainJobIsRecorded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := openTestWorkspace(t, dir)
	job, err := w.StartTrain(ctx, tinyTrainSpec(t, 6, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	phases := map[Phase]int{}
	for p := range job.Events {
		if p.RunID != job.RunID || p.Kind != store.KindTrain {
			t.Errorf("event %+v is not tagged with run %d", p, job.RunID)
		}
		phases[p.Phase]++
	}
	if err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	if phases[PhaseTrain] != 3 || phases[PhaseCheckpoint] != 2 || phases[PhaseDone] != 1 {
		t.Errorf("phases %v, want 3 train reports, 2 checkpoints, 1 done", phases)
	}
	run, err := w.Store.Run(ctx, job.RunID)
	if err != nil || run.Status != store.StatusDone {
		t.Fatalf("run %+v, %v", run, err)
	}
	losses, err := w.Store.Metrics(ctx, job.RunID, "train_loss")
	if err != nil || len(losses) != 3 {
		t.Errorf("train_loss points: %d, %v; want 3", len(losses), err)
	}
	if cks, _ := w.Store.Checkpoints(ctx, job.RunID); len(cks) != 2 {
		t.Errorf("checkpoints recorded: %d, want 2", len(cks))
	}
	ads, err := w.Store.Adapters(ctx, run.Model)
	if err != nil || len(ads) != 1 || ads[0].RunID != job.RunID {
		t.Errorf("adapters %+v, %v", ads, err)
	}
	if !strings.HasPrefix(run.Output, dir) {
		t.Errorf("adapter written to %s, want inside the data directory %s", run.Output, dir)
	}
	w.Close()

	var out, errb bytes.Buffer
	if code := Main([]string{"runs", "--data-dir", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "train") || !strings.Contains(out.String(), "6 steps") {
		t.Errorf("runs exited %d:\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Main([]string{"runs", "--data-dir", dir, "show", "1"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "train_loss") || !strings.Contains(out.String(), "checkpoints: 2") {
		t.Errorf("runs show exited %d:\n%s%s", code, out.String(), errb.String())
	}
}

// A run cut off by a crash shows as interrupted when the app opens again and
// resumes from its last checkpoint with one call.
func TestInterruptedRunResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := openTestWorkspace(t, dir)
	job, err := w.StartTrain(ctx, tinyTrainSpec(t, 8, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	for p := range job.Events {
		if p.Phase == PhaseCheckpoint && p.Step == 4 {
			job.Cancel()
		}
	}
	if err := job.Wait(); err == nil {
		t.Fatal("a cancelled job reported no error")
	}
	if r, _ := w.Store.Run(ctx, job.RunID); r.Status != store.StatusCancelled {
		t.Fatalf("after cancel the run is %s, want cancelled", r.Status)
	}
	// As if the process had died mid-run: the row says running.
	if err := w.Store.UpdateRunStatus(ctx, job.RunID, store.StatusRunning, ""); err != nil {
		t.Fatal(err)
	}
	w.Close()

	w = openTestWorkspace(t, dir)
	defer w.Close()
	if len(w.Interrupted) != 1 || w.Interrupted[0].ID != job.RunID {
		t.Fatalf("interrupted runs %+v, want run %d", w.Interrupted, job.RunID)
	}
	job2, err := w.Resume(ctx, job.RunID)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	for p := range job2.Events {
		resumed = resumed || strings.Contains(p.Message, "resumed from")
	}
	if err := job2.Wait(); err != nil {
		t.Fatal(err)
	}
	r, _ := w.Store.Run(ctx, job.RunID)
	if !resumed || r.Status != store.StatusDone || !strings.Contains(string(r.Result), `"resumed_from":4`) {
		t.Errorf("resume: said %v, run %s, result %s", resumed, r.Status, r.Result)
	}
	if _, err := w.Resume(ctx, job.RunID); err == nil {
		t.Error("a done run resumed again")
	}
}

// "demo" names the bundled model in every command, as the README promises.
func TestDemoNameEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("trains and quantizes the demo model")
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Main(append(args, "--data-dir", dir, "--backend", "cpu"), &out, &errb); code != 0 {
			t.Fatalf("%v exited %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	run("train", "--model", "demo", "--data", tinyData(t), "--iters", "2", "--batch-size", "2", "--max-seq-length", "32", "--steps-per-eval", "-1")
	if out := run("quantize", "--model", "demo", "--bits", "8"); !strings.Contains(out, "perplexity:") {
		t.Errorf("quantize output:\n%s", out)
	}
	fused := filepath.Join(t.TempDir(), "fused")
	if out := run("fuse", "--model", "demo", "--save-path", fused); !strings.Contains(out, "Fused") {
		t.Errorf("fuse output:\n%s", out)
	}
	// The quantized and fused copies are remembered by name.
	out := run("generate", "--model", "demo-8bit", "--prompt", "The", "--raw", "--max-tokens", "3", "--stats=false")
	if out == "" {
		t.Error("the quantized demo generated nothing")
	}
	if out := run("runs"); strings.Count(out, "done") != 2 {
		t.Errorf("runs lists:\n%s", out)
	}
}

// A finished job gives back the memory the backend kept for reuse: the cpu backend
// no longer returns freed buffers to the system on its own.
func pooled() int64 { _, p, _ := cpu.MemoryDetail(); return p }

// fillPool leaves freed buffers of a size nothing else asks for on the cpu
// backend's free list.
func fillPool(t *testing.T, w *Workspace) {
	t.Helper()
	for i := 0; i < 4 && pooled() == 0; i++ {
		for j := 0; j < 4; j++ {
			_ = mx.Exp(mx.Full(w.Backend, []int{1 << 16}, float32(j), mx.Float32))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
	if pooled() == 0 {
		t.Fatal("no freed buffer was kept for reuse")
	}
}

// A chat left alone hands its kept memory back after idleRelease; one in use
// keeps it.
func TestIdleChatReleasesMemory(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	defer func(d time.Duration) { idleRelease = d }(idleRelease)
	idleRelease = 200 * time.Millisecond
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 4, Sampling: inference.SampleOptions{Temperature: 0}, TTT: &ttt.Options{Steps: 1}})
	if err != nil {
		t.Fatal(err)
	}
	fillPool(t, w)
	done := w.chatBusy() // a turn in progress elsewhere: nothing goes back meanwhile
	if _, err := c.Send(ctx, "The keeper of the lighthouse counts the ships every night.", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * idleRelease)
	mx.Collect() // the turn's garbage back on the free list, whatever it reused of fillPool's
	if pooled() == 0 {
		t.Fatal("memory was released while a turn was running")
	}
	released := func() bool {
		for end := time.Now().Add(5 * time.Second); pooled() != 0 && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		return pooled() == 0
	}
	done()
	if !released() {
		t.Fatalf("%v after the last turn ended, %d bytes are still kept for reuse", idleRelease, pooled())
	}
	// A turn alone schedules the release, and so does feedback.
	fillPool(t, w)
	turn, err := c.Send(ctx, "Every night the keeper writes the names in a green book.", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !released() {
		t.Fatalf("%v after a turn, %d bytes are still kept for reuse", idleRelease, pooled())
	}
	fillPool(t, w)
	if _, err := c.Feedback(ctx, turn.MessageID, 1, ""); err != nil {
		t.Fatal(err)
	}
	if !released() {
		t.Fatalf("%v after feedback, %d bytes are still kept for reuse", idleRelease, pooled())
	}
}

func TestFinishedJobReleasesMemory(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	fillPool(t, w)
	job, err := w.StartTrain(ctx, tinyTrainSpec(t, 2, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	for range job.Events {
	}
	if err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	if p := pooled(); p != 0 {
		t.Errorf("after the job, %d bytes are still kept for reuse", p)
	}
}
