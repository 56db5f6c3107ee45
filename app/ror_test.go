package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/inloop/inloop/store"
)

// trainColorModel trains a small decision model on colorTask through the
// Workspace and returns its folder.
func trainColorModel(t *testing.T, w *Workspace, rows int) string {
	t.Helper()
	ctx := context.Background()
	taskFile := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(taskFile, []byte(colorTask), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m")
	job, err := w.StartDecideTrain(ctx, DecideSpec{Model: tinyModelDir(t), Task: taskFile, Rows: colorRowsFile(t, rows), Out: out,
		Iters: 4, BatchSize: 4, Rank: 2, Heldout: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	for range job.Events {
	}
	if err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The Workspace's RoR session: a thumb up changes no weights and is stored; a
// correction retrains (or rolls back) and is stored with its versions; an
// accepted change is saved to the folder, so a fresh session answers with it;
// undo goes back and marks the change undone in the store.
func TestDecisionSessionRoR(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	dir := trainColorModel(t, w, 40)
	if ms, err := w.DecisionModels(ctx); err != nil || len(ms) != 1 || filepath.Clean(ms[0].Adapter) != dir {
		t.Fatalf("DecisionModels: %+v, %v", ms, err)
	}
	s, err := w.OpenDecisionSession(ctx, dir, RoROptions{AnchorMargin: 1}) // every step passes the anchor check
	if err != nil {
		t.Fatal(err)
	}
	state := "my sea is here, and it is not fine"
	ds, err := s.Decide(ctx, state)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Decide: %+v, %v", ds, err)
	}
	color := ds[0]
	if color.Question != "color" {
		color = ds[1]
	}
	v0 := s.Version()
	up, err := s.ThumbUp(ctx, state, "color", color.Choice)
	if err != nil || up.Kind != RoRReinforce || s.Version() != v0 {
		t.Fatalf("thumb up: %+v, %v, version %d → %d", up, err, v0, s.Version())
	}
	// Correct it to an option it does not prefer.
	wrong := "red"
	if color.Choice == "red" {
		wrong = "green"
	}
	down, err := s.ThumbDown(ctx, state, "color", wrong)
	if err != nil {
		t.Fatal(err)
	}
	if down.Kind != RoRRetrain || down.VersionAfter == down.VersionBefore || s.Version() != down.VersionAfter {
		t.Fatalf("thumb down with a correction: %+v (version now %d)", down, s.Version())
	}
	// The accepted version was saved: a new session answers as this one does.
	ds1, err := s.Decide(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := w.OpenDecisionSession(ctx, dir, RoROptions{AnchorMargin: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds2, err := s2.Decide(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds1 {
		for o, p := range ds1[i].Probs {
			if d := p - ds2[i].Probs[o]; d > 1e-6 || d < -1e-6 {
				t.Errorf("after reload %s/%s: %v, before %v", ds1[i].Question, o, ds2[i].Probs[o], p)
			}
		}
	}
	undo, err := s.Undo(ctx)
	if err != nil || undo.VersionAfter != v0 || s.Version() != v0 {
		t.Fatalf("undo: %+v, %v", undo, err)
	}
	ds3, err := s.Decide(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		for o, p := range ds[i].Probs {
			if ds3[i].Probs[o] != p {
				t.Errorf("after undo %s/%s: %v, at first %v", ds[i].Question, o, ds3[i].Probs[o], p)
			}
		}
	}
	evs, err := w.Store.AdaptationEvents(ctx, store.EventFilter{Method: store.MethodRoR})
	if err != nil || len(evs) != 3 {
		t.Fatalf("events: %d, %v", len(evs), err)
	}
	for _, e := range evs { // newest first: undo, retrain, reinforce
		retrain := e.VersionAfter != e.VersionBefore && e.VersionAfter == int(down.VersionAfter)
		if retrain != e.Undone {
			t.Errorf("event %d (%d → %d): undone %v", e.ID, e.VersionBefore, e.VersionAfter, e.Undone)
		}
		if e.MS <= 0 {
			t.Errorf("event %d: no wall time", e.ID)
		}
	}
	if _, err := s.Undo(ctx); err != ErrNothingToUndo {
		t.Errorf("second undo: %v", err)
	}
}
