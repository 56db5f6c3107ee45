package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Adapter is one version of a model's adapter stack. Every change to the
// weights (a training run, an RoR step, a TAO round) adds a version; undo
// restores an earlier one.
type Adapter struct {
	ID            int64
	Model         string // the model it adapts, as the registry names it
	Name          string
	Path          string // the adapter folder (mlx-lm layout)
	Version       int
	ParentVersion int   // the version it was made from; 0 for none
	RunID         int64 // the run that made it; 0 for none
	Created       time.Time
}

const adapterCols = "id, model, name, path, version, parent_version, run_id, created_at"

func scanAdapter(r scanner) (Adapter, error) {
	var a Adapter
	var parent, runID, created sql.NullInt64
	err := r.Scan(&a.ID, &a.Model, &a.Name, &a.Path, &a.Version, &parent, &runID, &created)
	a.ParentVersion, a.RunID, a.Created = int(parent.Int64), runID.Int64, fromMillis(created)
	return a, err
}

// AddAdapter records an adapter version and returns it as stored. A zero
// Version takes the model's next number (one past its highest); an explicit
// one already taken is an error.
func (s *Store) AddAdapter(ctx context.Context, a Adapter) (Adapter, error) {
	if a.Model == "" {
		return Adapter{}, fmt.Errorf("store: add adapter %q: empty model", a.Name)
	}
	if a.Created.IsZero() {
		a.Created = now()
	}
	var out Adapter
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if a.Version == 0 {
			if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) + 1 FROM adapters WHERE model = ?",
				a.Model).Scan(&a.Version); err != nil {
				return err
			}
		}
		var err error
		out, err = scanAdapter(tx.QueryRowContext(ctx, `
			INSERT INTO adapters (model, name, path, version, parent_version, run_id, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING `+adapterCols,
			a.Model, a.Name, a.Path, a.Version, nullID(int64(a.ParentVersion)), nullID(a.RunID), millis(a.Created)))
		return err
	})
	if err != nil {
		return Adapter{}, fmt.Errorf("store: add adapter of %s: %w", a.Model, err)
	}
	return out, nil
}

// Adapters lists the versions of a model's adapter, oldest first.
func (s *Store) Adapters(ctx context.Context, model string) ([]Adapter, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+adapterCols+" FROM adapters WHERE model = ? ORDER BY version", model)
	as, err := collect(rows, err, scanAdapter)
	if err != nil {
		return nil, fmt.Errorf("store: adapters of %s: %w", model, err)
	}
	return as, nil
}

// AdapterVersion returns one version of a model's adapter, or ErrNotFound.
func (s *Store) AdapterVersion(ctx context.Context, model string, version int) (Adapter, error) {
	a, err := one(scanAdapter(s.r.QueryRowContext(ctx,
		"SELECT "+adapterCols+" FROM adapters WHERE model = ? AND version = ?", model, version)))
	if err != nil {
		return Adapter{}, fmt.Errorf("store: adapter %d of %s: %w", version, model, err)
	}
	return a, nil
}

// LatestAdapter returns the highest version of a model's adapter, or ErrNotFound.
func (s *Store) LatestAdapter(ctx context.Context, model string) (Adapter, error) {
	a, err := one(scanAdapter(s.r.QueryRowContext(ctx,
		"SELECT "+adapterCols+" FROM adapters WHERE model = ? ORDER BY version DESC LIMIT 1", model)))
	if err != nil {
		return Adapter{}, fmt.Errorf("store: latest adapter of %s: %w", model, err)
	}
	return a, nil
}

// DecisionTask is a set of typed questions a decision model answers.
type DecisionTask struct {
	ID      int64
	Name    string
	Model   string
	Adapter string          // the saved decision model's folder, once trained
	Config  json.RawMessage // the task file: questions and their options
	Created time.Time
}

const taskCols = "id, name, model, adapter, config, created_at"

func scanTask(r scanner) (DecisionTask, error) {
	var t DecisionTask
	var config sql.NullString
	var created sql.NullInt64
	err := r.Scan(&t.ID, &t.Name, &t.Model, &t.Adapter, &config, &created)
	t.Config, t.Created = fromJSON(config), fromMillis(created)
	return t, err
}

// CreateDecisionTask records a task and returns its id.
func (s *Store) CreateDecisionTask(ctx context.Context, t DecisionTask) (int64, error) {
	if t.Created.IsZero() {
		t.Created = now()
	}
	id, err := s.insert(ctx, "INSERT INTO decision_tasks (name, model, adapter, config, created_at) VALUES (?, ?, ?, ?, ?)",
		t.Name, t.Model, t.Adapter, rawJSON(t.Config), millis(t.Created))
	if err != nil {
		return 0, fmt.Errorf("store: create decision task %q: %w", t.Name, err)
	}
	return id, nil
}

// SetDecisionTaskAdapter records the folder of a task's trained decision model.
func (s *Store) SetDecisionTaskAdapter(ctx context.Context, id int64, adapter string) error {
	if err := s.exec(ctx, "UPDATE decision_tasks SET adapter = ? WHERE id = ?", adapter, id); err != nil {
		return fmt.Errorf("store: decision task %d: set adapter: %w", id, err)
	}
	return nil
}

// DecisionTask returns one task, or ErrNotFound.
func (s *Store) DecisionTask(ctx context.Context, id int64) (DecisionTask, error) {
	t, err := one(scanTask(s.r.QueryRowContext(ctx, "SELECT "+taskCols+" FROM decision_tasks WHERE id = ?", id)))
	if err != nil {
		return DecisionTask{}, fmt.Errorf("store: decision task %d: %w", id, err)
	}
	return t, nil
}

// DecisionTasks lists the tasks, newest first.
func (s *Store) DecisionTasks(ctx context.Context) ([]DecisionTask, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+taskCols+" FROM decision_tasks ORDER BY id DESC")
	ts, err := collect(rows, err, scanTask)
	if err != nil {
		return nil, fmt.Errorf("store: decision tasks: %w", err)
	}
	return ts, nil
}

// Calibration is the temperature fitted for a task (or one of its questions)
// on its held-out split, with what it did to the confidence.
type Calibration struct {
	ID          int64
	TaskID      int64
	RunID       int64  // 0 for none
	Question    string // empty for the whole task
	Temperature float64
	ECEBefore   float64
	ECEAfter    float64
	Accuracy    float64
	N           int // held-out examples
	BinsBefore  []ReliabilityBin
	BinsAfter   []ReliabilityBin
	Detail      json.RawMessage // NLL, Brier, coverage table, ...
	Created     time.Time
}

// ReliabilityBin is one bar of a reliability diagram.
type ReliabilityBin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Count      int     `json:"count"`
	Confidence float64 `json:"confidence"` // mean confidence of the answers in the bin
	Accuracy   float64 `json:"accuracy"`
}

const calibrationCols = `id, task_id, run_id, question, temperature, ece_before, ece_after, accuracy, n,
	bins_before, bins_after, detail, created_at`

func scanCalibration(r scanner) (Calibration, error) {
	var c Calibration
	var runID, created sql.NullInt64
	var before, after, acc sql.NullFloat64
	var binsBefore, binsAfter, detail sql.NullString
	if err := r.Scan(&c.ID, &c.TaskID, &runID, &c.Question, &c.Temperature, &before, &after, &acc, &c.N,
		&binsBefore, &binsAfter, &detail, &created); err != nil {
		return c, err
	}
	c.RunID, c.Created, c.Detail = runID.Int64, fromMillis(created), fromJSON(detail)
	c.ECEBefore, c.ECEAfter, c.Accuracy = fromReal(before), fromReal(after), fromReal(acc)
	if err := unmarshal(binsBefore, &c.BinsBefore); err != nil {
		return c, err
	}
	return c, unmarshal(binsAfter, &c.BinsAfter)
}

// AddCalibration records a calibration and returns its id.
func (s *Store) AddCalibration(ctx context.Context, c Calibration) (int64, error) {
	if c.Created.IsZero() {
		c.Created = now()
	}
	before, err := marshal(c.BinsBefore)
	if err != nil {
		return 0, fmt.Errorf("store: task %d: calibration: %w", c.TaskID, err)
	}
	after, err := marshal(c.BinsAfter)
	if err != nil {
		return 0, fmt.Errorf("store: task %d: calibration: %w", c.TaskID, err)
	}
	id, err := s.insert(ctx, `INSERT INTO calibrations (task_id, run_id, question, temperature, ece_before, ece_after,
			accuracy, n, bins_before, bins_after, detail, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.TaskID, nullID(c.RunID), c.Question, c.Temperature, c.ECEBefore, c.ECEAfter, c.Accuracy, c.N,
		before, after, rawJSON(c.Detail), millis(c.Created))
	if err != nil {
		return 0, fmt.Errorf("store: task %d: add calibration: %w", c.TaskID, err)
	}
	return id, nil
}

// Calibrations lists a task's calibrations, newest first.
func (s *Store) Calibrations(ctx context.Context, taskID int64) ([]Calibration, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+calibrationCols+" FROM calibrations WHERE task_id = ? ORDER BY id DESC", taskID)
	cs, err := collect(rows, err, scanCalibration)
	if err != nil {
		return nil, fmt.Errorf("store: task %d: calibrations: %w", taskID, err)
	}
	return cs, nil
}
