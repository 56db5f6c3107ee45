package store

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestModels(t *testing.T) {
	s, ctx := open(t), context.Background()
	added := time.UnixMilli(1_700_000_000_000)
	demo := Model{Name: "demo", Path: "/res/demo", Architecture: "llama", Params: 2_400_000, Bytes: 9_600_000,
		Source: "demo", AddedAt: added}
	got, err := s.UpsertModel(ctx, demo)
	if err != nil {
		t.Fatal(err)
	}
	demo.ID = got.ID
	if !reflect.DeepEqual(got, demo) {
		t.Fatalf("got %+v, want %+v", got, demo)
	}
	// The same path again updates the row in place.
	demo.Bits, demo.Bytes = 4, 1_500_000
	again, err := s.UpsertModel(ctx, Model{Name: "demo", Path: "/res/demo", Architecture: "llama",
		Params: 2_400_000, Bits: 4, Bytes: 1_500_000, Source: "demo"})
	if err != nil || !reflect.DeepEqual(again, demo) {
		t.Fatalf("upsert again: got %+v, %v; want %+v", again, err, demo)
	}
	qwen, err := s.UpsertModel(ctx, Model{Name: "qwen", Path: "/hub/qwen", Architecture: "qwen3", Source: "pulled"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertModel(ctx, Model{Name: "qwen", Path: "/elsewhere/qwen", Source: "folder"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		lookup func() (Model, error)
		want   int64
	}{
		{"by path", func() (Model, error) { return s.ModelByPath(ctx, "/hub/qwen") }, qwen.ID},
		{"by name, first registered wins", func() (Model, error) { return s.ModelByName(ctx, "qwen") }, qwen.ID},
		{"by name", func() (Model, error) { return s.ModelByName(ctx, "demo") }, demo.ID},
		{"missing name", func() (Model, error) { return s.ModelByName(ctx, "llama") }, 0},
		{"missing path", func() (Model, error) { return s.ModelByPath(ctx, "/nowhere") }, 0},
	}
	for _, tt := range tests {
		m, err := tt.lookup()
		if tt.want == 0 {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: got %v, want ErrNotFound", tt.name, err)
			}
			continue
		}
		if err != nil || m.ID != tt.want {
			t.Errorf("%s: got model %d, %v; want %d", tt.name, m.ID, err, tt.want)
		}
	}
	if err := s.TouchModel(ctx, qwen.ID); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.ModelByPath(ctx, "/hub/qwen"); m.LastUsedAt.IsZero() {
		t.Error("TouchModel did not set LastUsedAt")
	}
	if ms, err := s.Models(ctx); err != nil || len(ms) != 3 || ms[0].Name != "demo" {
		t.Fatalf("Models: %+v, %v", ms, err)
	}
	if _, err := s.UpsertModel(ctx, Model{Name: "x"}); err == nil {
		t.Error("a model without a path was accepted")
	}
}

func TestDatasets(t *testing.T) {
	s, ctx := open(t), context.Background()
	id, err := s.CreateDataset(ctx, Dataset{Name: "notes", Kind: "documents"})
	if err != nil {
		t.Fatal(err)
	}
	train := DatasetSource{DatasetID: id, Path: "/d/train.jsonl", Kind: "jsonl", Split: "train", Rows: 998,
		Problems: []Problem{{Line: 3, Message: `missing "text"`}, {Line: 17, Message: "not JSON"}}}
	if _, err := s.AddDatasetSource(ctx, train); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddDatasetSource(ctx, DatasetSource{DatasetID: id, Path: "/d/docs", Kind: "folder", Rows: 40}); err != nil {
		t.Fatal(err)
	}
	// Re-ingesting the folder after a change replaces its counts.
	if _, err := s.AddDatasetSource(ctx, DatasetSource{DatasetID: id, Path: "/d/docs", Kind: "folder", Rows: 41}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddDatasetSource(ctx, DatasetSource{DatasetID: id + 1, Path: "/x"}); err == nil {
		t.Fatal("a source of a missing dataset was accepted")
	}
	d, err := s.Dataset(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "notes" || len(d.Sources) != 2 || d.Sources[1].Rows != 41 ||
		!reflect.DeepEqual(d.Sources[0].Problems, train.Problems) || d.Sources[0].Split != "train" {
		t.Fatalf("got %+v", d)
	}
	other, _ := s.CreateDataset(ctx, Dataset{Name: "tickets", Kind: "decision"})
	ds, err := s.Datasets(ctx)
	if err != nil || len(ds) != 2 || ds[0].ID != other || len(ds[1].Sources) != 2 || ds[0].Sources != nil {
		t.Fatalf("Datasets: %+v, %v", ds, err)
	}
	if err := s.DeleteDataset(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dataset(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted dataset: got %v", err)
	}
	var n int
	if err := s.r.QueryRow("SELECT count(*) FROM dataset_sources").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d sources left after deleting their dataset (%v)", n, err)
	}
}

func TestAdapterVersions(t *testing.T) {
	s, ctx := open(t), context.Background()
	run, _ := s.CreateRun(ctx, Run{Kind: KindTrain})
	a1, err := s.AddAdapter(ctx, Adapter{Model: "demo", Name: "notes", Path: "/a/1", RunID: run})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.AddAdapter(ctx, Adapter{Model: "demo", Name: "notes", Path: "/a/2", ParentVersion: a1.Version})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.AddAdapter(ctx, Adapter{Model: "qwen", Path: "/b/1"})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Version != 1 || a2.Version != 2 || a2.ParentVersion != 1 || other.Version != 1 || a1.RunID != run {
		t.Fatalf("versions: %+v %+v %+v", a1, a2, other)
	}
	if _, err := s.AddAdapter(ctx, Adapter{Model: "demo", Version: 2}); err == nil {
		t.Fatal("a taken version was accepted")
	}
	if got, err := s.AdapterVersion(ctx, "demo", 1); err != nil || !reflect.DeepEqual(got, a1) {
		t.Fatalf("version 1: %+v, %v; want %+v", got, err, a1)
	}
	if _, err := s.AdapterVersion(ctx, "demo", 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("version 3: got %v", err)
	}
	if got, err := s.LatestAdapter(ctx, "demo"); err != nil || got.Version != 2 {
		t.Fatalf("latest: %+v, %v", got, err)
	}
	if as, err := s.Adapters(ctx, "demo"); err != nil || len(as) != 2 || as[0].Path != "/a/1" {
		t.Fatalf("Adapters: %+v, %v", as, err)
	}
	// The adapter outlives the run that made it.
	if err := s.DeleteRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.AdapterVersion(ctx, "demo", 1); got.RunID != 0 {
		t.Fatalf("RunID %d after the run was deleted", got.RunID)
	}
}

func TestDecisionTasksAndCalibrations(t *testing.T) {
	s, ctx := open(t), context.Background()
	config := json.RawMessage(`{"questions":[{"name":"refund","type":"yesno"}]}`)
	id, err := s.CreateDecisionTask(ctx, DecisionTask{Name: "tickets", Model: "demo", Config: config})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetDecisionTaskAdapter(ctx, id, "/decide/tickets"); err != nil {
		t.Fatal(err)
	}
	task, err := s.DecisionTask(ctx, id)
	if err != nil || task.Adapter != "/decide/tickets" || string(task.Config) != string(config) {
		t.Fatalf("task %+v, %v", task, err)
	}
	run, _ := s.CreateRun(ctx, Run{Kind: KindDecide})
	want := Calibration{TaskID: id, RunID: run, Question: "refund", Temperature: 1.7, ECEBefore: 0.21, ECEAfter: 0.03,
		Accuracy: 0.91, N: 200, Detail: json.RawMessage(`{"nll_after":0.3}`), Created: time.UnixMilli(1_700_000_000_000),
		BinsBefore: []ReliabilityBin{{Lo: 0.9, Hi: 1, Count: 150, Confidence: 0.97, Accuracy: 0.8}},
		BinsAfter:  []ReliabilityBin{{Lo: 0.8, Hi: 0.9, Count: 150, Confidence: 0.85, Accuracy: 0.84}}}
	if want.ID, err = s.AddCalibration(ctx, want); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Calibrations(ctx, id)
	if err != nil || len(cs) != 1 || !reflect.DeepEqual(cs[0], want) {
		t.Fatalf("got %+v, %v; want %+v", cs, err, want)
	}
	if ts, err := s.DecisionTasks(ctx); err != nil || len(ts) != 1 {
		t.Fatalf("DecisionTasks: %+v, %v", ts, err)
	}
	if _, err := s.AddCalibration(ctx, Calibration{TaskID: id + 1}); err == nil {
		t.Fatal("a calibration of a missing task was accepted")
	}
}

// A chat's messages and their feedback go with it; its adaptation events stay.
func TestChatsCascade(t *testing.T) {
	s, ctx := open(t), context.Background()
	chat, err := s.CreateChat(ctx, Chat{Title: "first", Model: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	conf := 0.83
	msgs := []Message{
		{ChatID: chat, Role: "user", Content: "hello"},
		{ChatID: chat, Role: "assistant", Content: "hi", AdapterVersion: 2, Confidence: &conf,
			Stats:   &MessageStats{Tokens: 2, TokensPerSec: 150.5, TTFTms: 12.25, KVBytes: 4096},
			Created: time.UnixMilli(1_700_000_000_000)},
	}
	for i := range msgs {
		if msgs[i].ID, err = s.AddMessage(ctx, msgs[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Messages(ctx, chat)
	if err != nil || len(got) != 2 || got[0].Stats != nil || got[0].Confidence != nil || !reflect.DeepEqual(got[1], msgs[1]) {
		t.Fatalf("messages %+v, %v", got, err)
	}
	reply := msgs[1].ID
	fb := []Feedback{{MessageID: reply, Thumb: -1, Correction: "hello there"}, {MessageID: reply, Thumb: 1}}
	for _, f := range fb {
		if _, err := s.AddFeedback(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddFeedback(ctx, Feedback{MessageID: reply, Thumb: 0}); err == nil {
		t.Fatal("thumb 0 was accepted")
	}
	if f, err := s.Feedback(ctx, reply); err != nil || len(f) != 2 || f[0].Correction != "hello there" || f[1].Thumb != 1 {
		t.Fatalf("feedback %+v, %v", f, err)
	}
	ev := AdaptationEvent{Model: "demo", ChatID: chat, MessageID: reply, Method: MethodRoR, MS: 41.5,
		VersionBefore: 2, VersionAfter: 3, Detail: json.RawMessage(`{"anchor_acc":0.9}`)}
	evID, err := s.AddAdaptationEvent(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkUndone(ctx, evID, true); err != nil {
		t.Fatal(err)
	}
	if es, err := s.AdaptationEvents(ctx, EventFilter{ChatID: chat}); err != nil || len(es) != 1 || !es[0].Undone ||
		es[0].VersionAfter != 3 || es[0].MS != 41.5 {
		t.Fatalf("events %+v, %v", es, err)
	}
	if err := s.RenameChat(ctx, chat, "renamed"); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Chat(ctx, chat); c.Title != "renamed" {
		t.Fatalf("title %q", c.Title)
	}

	if err := s.DeleteChat(ctx, chat); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Chat(ctx, chat); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted chat: got %v", err)
	}
	if _, err := s.Message(ctx, reply); !errors.Is(err, ErrNotFound) {
		t.Fatalf("message of a deleted chat: got %v", err)
	}
	if f, _ := s.Feedback(ctx, reply); len(f) != 0 {
		t.Fatalf("%d feedback rows left", len(f))
	}
	e, err := s.AdaptationEvent(ctx, evID)
	if err != nil || e.ChatID != 0 || e.MessageID != 0 || e.VersionBefore != 2 || !e.Undone {
		t.Fatalf("event after deleting its chat: %+v, %v", e, err)
	}
	if es, _ := s.AdaptationEvents(ctx, EventFilter{Model: "demo", Method: MethodRoR}); len(es) != 1 {
		t.Fatalf("by model: %d events", len(es))
	}
	if err := s.DeleteChat(ctx, chat); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting twice: got %v", err)
	}
}
