package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/trainer"
)

// DataSummary is what a data path holds for a model, before any training: the
// examples per split, their tokens, every problem found, and a preview.
type DataSummary struct {
	Path               string
	Kind               string // jsonl, splits or documents
	Train, Valid, Test int    // examples
	Tokens             int64  // in the training split
	Files              int    // documents read
	Problems           []string
	Preview            []string // the first training examples as text
	DatasetID          int64    // the dataset row recorded in the store
	// Verdicts, for a documents folder: every file and what became of it
	// (read with its pages, characters and chunks; skipped or failed, and why).
	Verdicts []DocumentVerdict
}

// DocumentVerdict is one file of a documents folder and what became of it.
type DocumentVerdict = data.Verdict

// The statuses of a DocumentVerdict.
const (
	DocumentRead    = data.StatusRead
	DocumentSkipped = data.StatusSkipped
	DocumentFailed  = data.StatusFailed
)

// InspectData reads path as a training run on model would and records it as a
// dataset. Unusable rows are listed in Problems, not hidden; a path with no usable
// example returns the summary so far and the error.
func (w *Workspace) InspectData(ctx context.Context, model, path string) (DataSummary, error) {
	return w.InspectDataProgress(ctx, model, path, nil)
}

// InspectDataProgress is InspectData reporting, for a documents folder, each
// file read: Done and Total count files, ETA is the time left, File the file
// just finished and Message a line for a person ("120/500 files, 14.2 MB of
// 80.0 MB, about 40s left"). progress runs on the reading goroutine.
func (w *Workspace) InspectDataProgress(ctx context.Context, model, path string, progress func(Progress)) (DataSummary, error) {
	info, err := w.ResolveModel(ctx, model)
	if err != nil {
		return DataSummary{}, err
	}
	var report func(data.ScanProgress)
	if progress != nil {
		report = func(p data.ScanProgress) {
			progress(Progress{Phase: PhaseInfo, Time: time.Now(), Message: "reading documents: " + p.String(),
				Path: path, File: p.Last.Path, Done: int64(p.Done), Total: int64(p.Total), ETA: p.ETA})
		}
	}
	d, err := trainer.LoadDatasetProgress(ctx, info.Path, path, 0, 512, report)
	s := DataSummary{Path: path}
	if d == nil {
		return s, err
	}
	s.Kind, s.Train, s.Valid, s.Test, s.Files = d.Kind, len(d.Train), len(d.Valid), len(d.Test), d.Files
	s.Verdicts = d.Verdicts
	for _, ex := range d.Train {
		s.Tokens += int64(len(ex.Tokens))
	}
	if d.Report != nil {
		for _, is := range append(d.Report.Issues, d.Report.Warnings...) {
			s.Problems = append(s.Problems, is.Error())
		}
		if d.Report.Omitted > 0 {
			s.Problems = append(s.Problems, fmt.Sprintf("and %d more", d.Report.Omitted))
		}
	}
	for _, wmsg := range d.Warnings {
		if !strings.HasPrefix(wmsg, "data: ") { // the report's rows are listed one by one above
			s.Problems = append(s.Problems, wmsg)
		}
	}
	for _, ex := range d.Train[:min(len(d.Train), 20)] {
		ids := make([]int, len(ex.Tokens))
		for i, t := range ex.Tokens {
			ids[i] = int(t)
		}
		s.Preview = append(s.Preview, d.Tokenizer.Decode(ids, true))
	}
	if id, rerr := w.recordDataset(ctx, s); rerr == nil {
		s.DatasetID = id
	}
	return s, err
}

func (w *Workspace) recordDataset(ctx context.Context, s DataSummary) (int64, error) {
	id, err := w.Store.CreateDataset(ctx, store.Dataset{Name: s.Path, Kind: s.Kind})
	if err != nil {
		return 0, err
	}
	probs := make([]store.Problem, len(s.Problems))
	for i, p := range s.Problems {
		probs[i] = store.Problem{Message: p}
	}
	_, err = w.Store.AddDatasetSource(ctx, store.DatasetSource{DatasetID: id, Path: s.Path, Kind: s.Kind, Rows: s.Train + s.Valid + s.Test, Problems: probs})
	return id, err
}

// WatchData watches a documents folder and calls onChange (on its own goroutine)
// with the number of documents added, changed or removed since the watch began,
// until ctx ends.
func (w *Workspace) WatchData(ctx context.Context, model, dir string) (<-chan int, error) {
	info, err := w.ResolveModel(ctx, model)
	if err != nil {
		return nil, err
	}
	d, err := trainer.LoadDataset(info.Path, dir, 0, 512)
	if err != nil {
		return nil, err
	}
	if d.Kind != trainer.DataDocuments {
		return nil, errors.New("only a folder of documents can be watched")
	}
	c, err := data.NewCorpus(dir, d.Tokenizer, data.ChunkOptions{Size: d.ChunkSize, Overlap: d.ChunkSize / 8})
	if err != nil {
		return nil, err
	}
	if _, err := c.Scan(); err != nil {
		return nil, err
	}
	wt, err := c.Watch(data.WatchOptions{})
	if err != nil {
		return nil, err
	}
	out := make(chan int, 1)
	go func() {
		defer close(out)
		defer wt.Close()
		changed := map[string]bool{}
		for {
			select {
			case <-ctx.Done():
				return
			case ch, ok := <-wt.Events():
				if !ok {
					return
				}
				if ch.Op == data.Failed {
					continue
				}
				changed[ch.Path] = true
				select { // the newest count replaces an unread one
				case <-out:
				default:
				}
				out <- len(changed)
			}
		}
	}()
	return out, nil
}
