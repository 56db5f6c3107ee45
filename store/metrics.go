package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"
)

// Metric is one value a run reported at a step: a loss, a learning rate,
// tokens per second, a validation accuracy.
type Metric struct {
	RunID int64
	Step  int
	Name  string
	Value float64 // NaN survives the round trip
	Time  time.Time
}

const upsertMetric = `
	INSERT INTO metrics (run_id, name, step, value, time) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value, time = excluded.time`

// metricArgs gives the insert's arguments; a zero Time is now.
func metricArgs(m Metric) []any {
	t := m.Time
	if t.IsZero() {
		t = now()
	}
	// database/sql would send NaN, which SQLite turns into NULL anyway; say so.
	var v any = m.Value
	if m.Value != m.Value {
		v = nil
	}
	return []any{m.RunID, m.Name, m.Step, v, t.UnixMilli()}
}

// AddMetric records one metric value, committed when it returns. A value for
// a (run, name, step) already recorded, as a resumed run repeats steps,
// replaces the old one.
func (s *Store) AddMetric(ctx context.Context, m Metric) error {
	if _, err := s.w.ExecContext(ctx, upsertMetric, metricArgs(m)...); err != nil {
		return fmt.Errorf("store: run %d: metric %s at step %d: %w", m.RunID, m.Name, m.Step, err)
	}
	return nil
}

// AddMetrics records several metric values in one transaction: all or none.
func (s *Store) AddMetrics(ctx context.Context, ms []Metric) error {
	if len(ms) == 0 {
		return nil
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, upsertMetric)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, m := range ms {
			if _, err := stmt.ExecContext(ctx, metricArgs(m)...); err != nil {
				return fmt.Errorf("run %d: metric %s at step %d: %w", m.RunID, m.Name, m.Step, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: add %d metrics: %w", len(ms), err)
	}
	return nil
}

func scanMetric(r scanner) (Metric, error) {
	var m Metric
	var v sql.NullFloat64
	var t sql.NullInt64
	err := r.Scan(&m.RunID, &m.Name, &m.Step, &v, &t)
	m.Value, m.Time = fromReal(v), fromMillis(t)
	return m, err
}

// Metrics returns the values of one metric of a run by step.
func (s *Store) Metrics(ctx context.Context, runID int64, name string) ([]Metric, error) {
	return s.MetricsAfter(ctx, runID, name, math.MinInt)
}

// MetricsAfter returns the values of one metric of a run at steps after
// step, so a live chart can fetch only what is new.
func (s *Store) MetricsAfter(ctx context.Context, runID int64, name string, step int) ([]Metric, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT run_id, name, step, value, time FROM metrics
		WHERE run_id = ? AND name = ? AND step > ? ORDER BY step`, runID, name, step)
	ms, err := collect(rows, err, scanMetric)
	if err != nil {
		return nil, fmt.Errorf("store: run %d: metric %s: %w", runID, name, err)
	}
	return ms, nil
}

// MetricNames lists the names of the metrics a run has recorded.
func (s *Store) MetricNames(ctx context.Context, runID int64) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", runID)
	names, err := collect(rows, err, func(r scanner) (n string, err error) { return n, r.Scan(&n) })
	if err != nil {
		return nil, fmt.Errorf("store: run %d: metric names: %w", runID, err)
	}
	return names, nil
}

// LastMetrics returns, for each metric of a run, its value at the highest
// step: the figures a run list shows.
func (s *Store) LastMetrics(ctx context.Context, runID int64) (map[string]Metric, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT run_id, name, step, value, time FROM metrics AS m
		WHERE run_id = ? AND step = (SELECT max(step) FROM metrics WHERE run_id = m.run_id AND name = m.name)`, runID)
	ms, err := collect(rows, err, scanMetric)
	if err != nil {
		return nil, fmt.Errorf("store: run %d: last metrics: %w", runID, err)
	}
	out := make(map[string]Metric, len(ms))
	for _, m := range ms {
		out[m.Name] = m
	}
	return out, nil
}

// Checkpoint is a saved training state of a run, a folder on disk.
type Checkpoint struct {
	ID      int64
	RunID   int64
	Step    int
	Path    string
	Created time.Time
}

// AddCheckpoint records a checkpoint; one at a step already recorded replaces it.
func (s *Store) AddCheckpoint(ctx context.Context, c Checkpoint) (int64, error) {
	if c.Created.IsZero() {
		c.Created = now()
	}
	var id int64
	err := s.w.QueryRowContext(ctx, `INSERT INTO checkpoints (run_id, step, path, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (run_id, step) DO UPDATE SET path = excluded.path, created_at = excluded.created_at
		RETURNING id`, c.RunID, c.Step, c.Path, millis(c.Created)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store: run %d: checkpoint at step %d: %w", c.RunID, c.Step, err)
	}
	return id, nil
}

func scanCheckpoint(r scanner) (Checkpoint, error) {
	var c Checkpoint
	var created sql.NullInt64
	err := r.Scan(&c.ID, &c.RunID, &c.Step, &c.Path, &created)
	c.Created = fromMillis(created)
	return c, err
}

// Checkpoints lists a run's checkpoints by step.
func (s *Store) Checkpoints(ctx context.Context, runID int64) ([]Checkpoint, error) {
	rows, err := s.r.QueryContext(ctx,
		"SELECT id, run_id, step, path, created_at FROM checkpoints WHERE run_id = ? ORDER BY step", runID)
	cs, err := collect(rows, err, scanCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("store: run %d: checkpoints: %w", runID, err)
	}
	return cs, nil
}

// LatestCheckpoint returns a run's checkpoint at the highest step, or
// ErrNotFound. The folder itself may since have been damaged; the checkpoint
// package decides whether it loads.
func (s *Store) LatestCheckpoint(ctx context.Context, runID int64) (Checkpoint, error) {
	c, err := one(scanCheckpoint(s.r.QueryRowContext(ctx,
		"SELECT id, run_id, step, path, created_at FROM checkpoints WHERE run_id = ? ORDER BY step DESC LIMIT 1", runID)))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("store: run %d: latest checkpoint: %w", runID, err)
	}
	return c, nil
}

// DeleteCheckpoint forgets the checkpoint of a run at step, after its folder
// was pruned.
func (s *Store) DeleteCheckpoint(ctx context.Context, runID int64, step int) error {
	if err := s.exec(ctx, "DELETE FROM checkpoints WHERE run_id = ? AND step = ?", runID, step); err != nil {
		return fmt.Errorf("store: run %d: delete checkpoint at step %d: %w", runID, step, err)
	}
	return nil
}
