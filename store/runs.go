package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// RunKind is what a run does.
type RunKind string

const (
	KindTrain    RunKind = "train"
	KindQuantize RunKind = "quantize"
	KindPull     RunKind = "pull"
	KindDecide   RunKind = "decide"
	KindTAO      RunKind = "tao"
)

// RunStatus is where a run is in its life.
type RunStatus string

const (
	StatusQueued    RunStatus = "queued"
	StatusRunning   RunStatus = "running"
	StatusDone      RunStatus = "done"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
	// StatusInterrupted is a run that was running when the app stopped
	// (quit or crash); it can resume from its last checkpoint.
	StatusInterrupted RunStatus = "interrupted"
)

// Terminal reports whether a run in this status has finished, one way or another.
func (st RunStatus) Terminal() bool {
	return st == StatusDone || st == StatusFailed || st == StatusCancelled
}

// transitions lists the statuses a run may come from for each status it may go
// to. A done run is final; an interrupted, failed or cancelled one may run again.
var transitions = map[RunStatus][]RunStatus{
	StatusQueued:      {StatusInterrupted, StatusFailed, StatusCancelled},
	StatusRunning:     {StatusQueued, StatusInterrupted, StatusFailed, StatusCancelled},
	StatusDone:        {StatusRunning},
	StatusFailed:      {StatusQueued, StatusRunning, StatusInterrupted},
	StatusCancelled:   {StatusQueued, StatusRunning, StatusInterrupted},
	StatusInterrupted: {StatusRunning},
}

// ErrBadTransition is returned (wrapped) when a run is moved to a status it
// cannot reach from its current one, such as a done run back to running.
var ErrBadTransition = errors.New("status change not allowed")

// Run is one job: a training, quantization, download, decision training or
// TAO round. Zero times are unset.
type Run struct {
	ID        int64
	Kind      RunKind
	Model     string // the model as named when the run started
	ModelID   int64  // 0 when not a registered model (or since deleted)
	Dataset   string
	DatasetID int64
	Params    json.RawMessage
	Status    RunStatus
	Error     string
	Result    json.RawMessage // final figures
	Output    string          // path of what the run produced
	Created   time.Time
	Started   time.Time
	Finished  time.Time
}

const runCols = `id, kind, model, model_id, dataset, dataset_id, params, status, error, result, output,
	created_at, started_at, finished_at`

func scanRun(r scanner) (Run, error) {
	var run Run
	var modelID, datasetID, created, started, finished sql.NullInt64
	var params, result sql.NullString
	err := r.Scan(&run.ID, &run.Kind, &run.Model, &modelID, &run.Dataset, &datasetID, &params, &run.Status,
		&run.Error, &result, &run.Output, &created, &started, &finished)
	run.ModelID, run.DatasetID = modelID.Int64, datasetID.Int64
	run.Params, run.Result = fromJSON(params), fromJSON(result)
	run.Created, run.Started, run.Finished = fromMillis(created), fromMillis(started), fromMillis(finished)
	return run, err
}

// CreateRun records a new run and returns its id. An empty Status is queued;
// a zero Created is now.
func (s *Store) CreateRun(ctx context.Context, r Run) (int64, error) {
	if r.Kind == "" {
		return 0, fmt.Errorf("store: create run: empty kind")
	}
	if r.Status == "" {
		r.Status = StatusQueued
	}
	if _, ok := transitions[r.Status]; !ok {
		return 0, fmt.Errorf("store: create run: unknown status %q", r.Status)
	}
	if r.Created.IsZero() {
		r.Created = now()
	}
	if r.Status == StatusRunning && r.Started.IsZero() {
		r.Started = r.Created
	}
	id, err := s.insert(ctx, `
		INSERT INTO runs (kind, model, model_id, dataset, dataset_id, params, status, error, result, output,
			created_at, started_at, finished_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Kind, r.Model, nullID(r.ModelID), r.Dataset, nullID(r.DatasetID), rawJSON(r.Params), r.Status, r.Error,
		rawJSON(r.Result), r.Output, millis(r.Created), millis(r.Started), millis(r.Finished))
	if err != nil {
		return 0, fmt.Errorf("store: create %s run: %w", r.Kind, err)
	}
	return id, nil
}

// UpdateRunStatus moves a run to status, with errText as its error (empty
// clears it). Going to running stamps Started the first time and clears
// Finished; a terminal status stamps Finished. A change the run's current
// status does not allow gives ErrBadTransition; setting the status it already
// has is allowed and only updates the error text.
func (s *Store) UpdateRunStatus(ctx context.Context, id int64, status RunStatus, errText string) error {
	return s.finish(ctx, id, RunOutcome{Status: status, Error: errText}, false)
}

// RunOutcome is how a run ended.
type RunOutcome struct {
	Status RunStatus // done, failed or cancelled
	Error  string
	Result json.RawMessage // final figures, kept when nil
	Output string          // path of what the run produced, kept when empty
}

// FinishRun ends a run with a terminal status and records its result.
func (s *Store) FinishRun(ctx context.Context, id int64, o RunOutcome) error {
	if !o.Status.Terminal() {
		return fmt.Errorf("store: finish run %d: %q is not a final status", id, o.Status)
	}
	return s.finish(ctx, id, o, true)
}

func (s *Store) finish(ctx context.Context, id int64, o RunOutcome, withResult bool) error {
	from, ok := transitions[o.Status]
	if !ok {
		return fmt.Errorf("store: run %d: unknown status %q", id, o.Status)
	}
	allowed := append([]RunStatus{o.Status}, from...)
	args := []any{o.Status, o.Error}
	set := "status = ?, error = ?"
	switch {
	case o.Status == StatusRunning:
		set += ", started_at = coalesce(started_at, ?), finished_at = NULL"
		args = append(args, millis(now()))
	case o.Status.Terminal():
		set += ", finished_at = coalesce(finished_at, ?)"
		args = append(args, millis(now()))
	}
	if withResult {
		set += ", result = coalesce(?, result), output = coalesce(nullif(?, ''), output)"
		args = append(args, rawJSON(o.Result), o.Output)
	}
	args = append(args, id)
	for _, st := range allowed {
		args = append(args, st)
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE runs SET "+set+" WHERE id = ? AND status IN (?"+
			strings.Repeat(", ?", len(allowed)-1)+")", args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		var cur RunStatus
		if err := tx.QueryRowContext(ctx, "SELECT status FROM runs WHERE id = ?", id).Scan(&cur); err != nil {
			_, err = one(0, err)
			return err
		}
		return fmt.Errorf("%w: %s to %s", ErrBadTransition, cur, o.Status)
	})
	if err != nil {
		return fmt.Errorf("store: run %d: %w", id, err)
	}
	return nil
}

// Run returns one run, or ErrNotFound.
func (s *Store) Run(ctx context.Context, id int64) (Run, error) {
	r, err := one(scanRun(s.r.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = ?", id)))
	if err != nil {
		return Run{}, fmt.Errorf("store: run %d: %w", id, err)
	}
	return r, nil
}

// RunFilter selects runs; zero fields select everything.
type RunFilter struct {
	Kind   RunKind
	Status RunStatus
	Limit  int // at most this many, newest first
}

// Runs lists runs, newest first.
func (s *Store) Runs(ctx context.Context, f RunFilter) ([]Run, error) {
	q := "SELECT " + runCols + " FROM runs WHERE 1=1"
	var args []any
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, f.Kind)
	}
	if f.Status != "" {
		q += " AND status = ?"
		args = append(args, f.Status)
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	runs, err := collect(rows, err, scanRun)
	if err != nil {
		return nil, fmt.Errorf("store: runs: %w", err)
	}
	return runs, nil
}

// MarkRunningInterrupted is for app start: a run still marked running was cut
// off by a quit or crash, since no run outlives the process that runs it.
// Each becomes interrupted; they are returned, with their new status, so the
// app can offer to resume them.
func (s *Store) MarkRunningInterrupted(ctx context.Context) ([]Run, error) {
	var runs []Run
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "UPDATE runs SET status = ? WHERE status = ? RETURNING "+runCols,
			StatusInterrupted, StatusRunning)
		runs, err = collect(rows, err, scanRun)
		return err
	})
	slices.SortFunc(runs, func(a, b Run) int { return cmp.Compare(a.ID, b.ID) })
	if err != nil {
		return nil, fmt.Errorf("store: mark running runs interrupted: %w", err)
	}
	return runs, nil
}

// DeleteRun removes a run with its metrics and checkpoint rows (not the
// checkpoint files); adapters and calibrations it made lose the reference.
func (s *Store) DeleteRun(ctx context.Context, id int64) error {
	if err := s.exec(ctx, "DELETE FROM runs WHERE id = ?", id); err != nil {
		return fmt.Errorf("store: delete run %d: %w", id, err)
	}
	return nil
}
