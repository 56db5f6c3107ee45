package store

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestRunRoundTrip(t *testing.T) {
	s, ctx := open(t), context.Background()
	m, err := s.UpsertModel(ctx, Model{Name: "demo", Path: "/models/demo", Source: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	created := time.UnixMilli(1_700_000_000_123)
	want := Run{Kind: KindTrain, Model: "demo", ModelID: m.ID, Dataset: "notes", Params: json.RawMessage(`{"lr":0.0001}`),
		Status: StatusQueued, Created: created}
	id, err := s.CreateRun(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	want.ID = id
	got, err := s.Run(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := s.Run(ctx, id+1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing run: got %v, want ErrNotFound", err)
	}
	// Deleting the model keeps the run and the model's name.
	if err := s.DeleteModel(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Run(ctx, id); got.ModelID != 0 || got.Model != "demo" {
		t.Fatalf("after deleting the model: ModelID %d, Model %q; want 0, demo", got.ModelID, got.Model)
	}
}

func TestRunStatusTransitions(t *testing.T) {
	tests := []struct {
		path []RunStatus // statuses set one after another from queued
		bad  RunStatus   // the last step must fail with ErrBadTransition, if set
	}{
		{path: []RunStatus{StatusRunning, StatusDone}},
		{path: []RunStatus{StatusRunning, StatusFailed, StatusRunning, StatusDone}},
		{path: []RunStatus{StatusRunning, StatusInterrupted, StatusRunning, StatusCancelled}},
		{path: []RunStatus{StatusCancelled, StatusQueued, StatusRunning}},
		{path: []RunStatus{StatusRunning, StatusRunning}},
		{path: []RunStatus{StatusRunning, StatusDone}, bad: StatusRunning},
		{path: []RunStatus{StatusRunning, StatusDone}, bad: StatusInterrupted},
		{path: nil, bad: StatusDone},
		{path: nil, bad: StatusInterrupted},
		{path: []RunStatus{StatusRunning, StatusInterrupted}, bad: StatusDone},
	}
	s, ctx := open(t), context.Background()
	for _, tt := range tests {
		id, err := s.CreateRun(ctx, Run{Kind: KindQuantize})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range tt.path {
			if err := s.UpdateRunStatus(ctx, id, st, ""); err != nil {
				t.Fatalf("%v: %v", tt.path, err)
			}
		}
		last := StatusQueued
		if len(tt.path) > 0 {
			last = tt.path[len(tt.path)-1]
		}
		if tt.bad != "" {
			err := s.UpdateRunStatus(ctx, id, tt.bad, "")
			if !errors.Is(err, ErrBadTransition) {
				t.Fatalf("%v then %s: got %v, want ErrBadTransition", tt.path, tt.bad, err)
			}
		}
		r, err := s.Run(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != last {
			t.Errorf("%v: status %s, want %s", tt.path, r.Status, last)
		}
		if slices.Contains(tt.path, StatusRunning) == r.Started.IsZero() {
			t.Errorf("%v: Started %v", tt.path, r.Started)
		}
		if last.Terminal() == r.Finished.IsZero() {
			t.Errorf("%v: Finished %v with status %s", tt.path, r.Finished, last)
		}
	}
	if err := s.UpdateRunStatus(ctx, 999, StatusRunning, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing run: got %v, want ErrNotFound", err)
	}
	if err := s.UpdateRunStatus(ctx, 1, "paused", ""); err == nil {
		t.Fatal("an unknown status was accepted")
	}
}

func TestFinishRun(t *testing.T) {
	s, ctx := open(t), context.Background()
	id, err := s.CreateRun(ctx, Run{Kind: KindTrain, Status: StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, id, RunOutcome{Status: StatusRunning}); err == nil {
		t.Fatal("FinishRun accepted running")
	}
	result := json.RawMessage(`{"val_loss":1.25}`)
	if err := s.FinishRun(ctx, id, RunOutcome{Status: StatusDone, Result: result, Output: "/adapters/1"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusDone || string(r.Result) != string(result) || r.Output != "/adapters/1" ||
		r.Started.IsZero() || r.Finished.Before(r.Started) {
		t.Fatalf("got %+v", r)
	}

	failed, _ := s.CreateRun(ctx, Run{Kind: KindPull, Status: StatusRunning})
	if err := s.FinishRun(ctx, failed, RunOutcome{Status: StatusFailed, Error: "hub: 404"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Run(ctx, failed); r.Error != "hub: 404" || r.Result != nil {
		t.Fatalf("got %+v", r)
	}
}

func TestRunsAndMarkRunningInterrupted(t *testing.T) {
	s, ctx := open(t), context.Background()
	kinds := []RunKind{KindTrain, KindQuantize, KindTrain, KindPull, KindTrain}
	statuses := []RunStatus{StatusRunning, StatusRunning, StatusDone, StatusQueued, StatusRunning}
	for i := range kinds {
		if _, err := s.CreateRun(ctx, Run{Kind: kinds[i], Status: statuses[i]}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		f    RunFilter
		want []int64
	}{
		{RunFilter{}, []int64{5, 4, 3, 2, 1}},
		{RunFilter{Kind: KindTrain}, []int64{5, 3, 1}},
		{RunFilter{Kind: KindTrain, Limit: 2}, []int64{5, 3}},
		{RunFilter{Status: StatusRunning}, []int64{5, 2, 1}},
		{RunFilter{Kind: KindTAO}, nil},
	}
	for _, tt := range tests {
		runs, err := s.Runs(ctx, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Runs(%+v): got %v, want %v", tt.f, got, tt.want)
		}
	}
	runs, err := s.MarkRunningInterrupted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range runs {
		got = append(got, r.ID)
		if r.Status != StatusInterrupted {
			t.Errorf("run %d: returned with status %s", r.ID, r.Status)
		}
	}
	if want := []int64{1, 2, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("interrupted %v, want %v", got, want)
	}
	if left, _ := s.Runs(ctx, RunFilter{Status: StatusRunning}); len(left) != 0 {
		t.Fatalf("%d runs still running", len(left))
	}
	if again, _ := s.MarkRunningInterrupted(ctx); len(again) != 0 {
		t.Fatalf("second call interrupted %d runs", len(again))
	}
}

func TestMetricsAndCheckpoints(t *testing.T) {
	s, ctx := open(t), context.Background()
	id, _ := s.CreateRun(ctx, Run{Kind: KindTrain})
	at := time.UnixMilli(1_700_000_000_000)
	var batch []Metric
	for step := 1; step <= 5; step++ {
		batch = append(batch, Metric{RunID: id, Step: step, Name: "loss", Value: 1 / float64(step), Time: at},
			Metric{RunID: id, Step: step, Name: "lr", Value: 1e-4, Time: at})
	}
	if err := s.AddMetrics(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// A resumed run repeats step 5 with a new value; a diverged one reports NaN.
	if err := s.AddMetric(ctx, Metric{RunID: id, Step: 5, Name: "loss", Value: 0.125, Time: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMetric(ctx, Metric{RunID: id, Step: 6, Name: "loss", Value: math.NaN()}); err != nil {
		t.Fatal(err)
	}
	loss, err := s.Metrics(ctx, id, "loss")
	if err != nil {
		t.Fatal(err)
	}
	if len(loss) != 6 || loss[0] != (Metric{RunID: id, Step: 1, Name: "loss", Value: 1, Time: at}) ||
		loss[4].Value != 0.125 || !math.IsNaN(loss[5].Value) || loss[5].Time.IsZero() {
		t.Fatalf("got %+v", loss)
	}
	if after, _ := s.MetricsAfter(ctx, id, "loss", 4); len(after) != 2 || after[0].Step != 5 {
		t.Fatalf("MetricsAfter 4: got %+v", after)
	}
	names, err := s.MetricNames(ctx, id)
	if err != nil || !reflect.DeepEqual(names, []string{"loss", "lr"}) {
		t.Fatalf("names %v, %v", names, err)
	}
	last, err := s.LastMetrics(ctx, id)
	if err != nil || len(last) != 2 || last["lr"].Step != 5 || last["loss"].Step != 6 {
		t.Fatalf("last %+v, %v", last, err)
	}
	// A batch with a bad row writes nothing.
	bad := []Metric{{RunID: id, Step: 7, Name: "loss", Value: 1}, {RunID: id + 100, Step: 7, Name: "loss"}}
	if err := s.AddMetrics(ctx, bad); err == nil {
		t.Fatal("a metric of a missing run was accepted")
	}
	if after, _ := s.MetricsAfter(ctx, id, "loss", 6); len(after) != 0 {
		t.Fatalf("half a batch was written: %+v", after)
	}

	if _, err := s.LatestCheckpoint(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no checkpoint yet: got %v", err)
	}
	for _, step := range []int{100, 300, 200} {
		if _, err := s.AddCheckpoint(ctx, Checkpoint{RunID: id, Step: step, Path: "ckpt"}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := s.LatestCheckpoint(ctx, id); err != nil || c.Step != 300 {
		t.Fatalf("latest: %+v, %v", c, err)
	}
	if err := s.DeleteCheckpoint(ctx, id, 300); err != nil {
		t.Fatal(err)
	}
	if cs, _ := s.Checkpoints(ctx, id); len(cs) != 2 || cs[0].Step != 100 || cs[1].Step != 200 {
		t.Fatalf("checkpoints %+v", cs)
	}
	// Deleting the run takes its metrics and checkpoints with it.
	if err := s.DeleteRun(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Metrics(ctx, id, "loss"); len(ms) != 0 {
		t.Fatalf("%d metrics left", len(ms))
	}
	if cs, _ := s.Checkpoints(ctx, id); len(cs) != 0 {
		t.Fatalf("%d checkpoints left", len(cs))
	}
}
