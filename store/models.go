package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Model is a model the app knows: the bundled demo, one pulled from a hub, or
// a folder the user opened. Path is its identity.
type Model struct {
	ID           int64
	Name         string
	Path         string
	Architecture string // HF model_type: llama, qwen2, qwen3
	Params       int64
	Bits         int // 0 when not quantized
	Bytes        int64
	Source       string // demo, pulled, folder, quantized, fused
	AddedAt      time.Time
	LastUsedAt   time.Time // zero until first used
}

const modelCols = "id, name, path, architecture, params, bits, bytes, source, added_at, last_used_at"

func scanModel(r scanner) (Model, error) {
	var m Model
	var added, used sql.NullInt64
	err := r.Scan(&m.ID, &m.Name, &m.Path, &m.Architecture, &m.Params, &m.Bits, &m.Bytes, &m.Source, &added, &used)
	m.AddedAt, m.LastUsedAt = fromMillis(added), fromMillis(used)
	return m, err
}

// UpsertModel records m by its path: a new path adds a row, a known path has
// its description updated and keeps its id and AddedAt. It returns the row as
// stored.
func (s *Store) UpsertModel(ctx context.Context, m Model) (Model, error) {
	if m.Path == "" {
		return Model{}, fmt.Errorf("store: upsert model %q: empty path", m.Name)
	}
	if m.AddedAt.IsZero() {
		m.AddedAt = now()
	}
	row := s.w.QueryRowContext(ctx, `
		INSERT INTO models (name, path, architecture, params, bits, bytes, source, added_at, last_used_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (path) DO UPDATE SET
			name = excluded.name, architecture = excluded.architecture, params = excluded.params,
			bits = excluded.bits, bytes = excluded.bytes, source = excluded.source,
			last_used_at = coalesce(excluded.last_used_at, last_used_at)
		RETURNING `+modelCols,
		m.Name, m.Path, m.Architecture, m.Params, m.Bits, m.Bytes, m.Source, millis(m.AddedAt), millis(m.LastUsedAt))
	out, err := scanModel(row)
	if err != nil {
		return Model{}, fmt.Errorf("store: upsert model %s: %w", m.Path, err)
	}
	return out, nil
}

// Models lists the known models by name.
func (s *Store) Models(ctx context.Context) ([]Model, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+modelCols+" FROM models ORDER BY name, id")
	ms, err := collect(rows, err, scanModel)
	if err != nil {
		return nil, fmt.Errorf("store: models: %w", err)
	}
	return ms, nil
}

// ModelByPath returns the model stored at path, or ErrNotFound.
func (s *Store) ModelByPath(ctx context.Context, path string) (Model, error) {
	m, err := one(scanModel(s.r.QueryRowContext(ctx, "SELECT "+modelCols+" FROM models WHERE path = ?", path)))
	if err != nil {
		return Model{}, fmt.Errorf("store: model at %s: %w", path, err)
	}
	return m, nil
}

// ModelByName returns the model called name, or ErrNotFound. Names need not be
// unique; when several models share one, the first registered wins, so a name
// resolves to the same model in every command until that model is deleted.
func (s *Store) ModelByName(ctx context.Context, name string) (Model, error) {
	m, err := one(scanModel(s.r.QueryRowContext(ctx,
		"SELECT "+modelCols+" FROM models WHERE name = ? ORDER BY id LIMIT 1", name)))
	if err != nil {
		return Model{}, fmt.Errorf("store: model %q: %w", name, err)
	}
	return m, nil
}

// TouchModel sets a model's LastUsedAt to now.
func (s *Store) TouchModel(ctx context.Context, id int64) error {
	if err := s.exec(ctx, "UPDATE models SET last_used_at = ? WHERE id = ?", millis(now()), id); err != nil {
		return fmt.Errorf("store: touch model %d: %w", id, err)
	}
	return nil
}

// DeleteModel forgets a model; runs that used it keep its name.
func (s *Store) DeleteModel(ctx context.Context, id int64) error {
	if err := s.exec(ctx, "DELETE FROM models WHERE id = ?", id); err != nil {
		return fmt.Errorf("store: delete model %d: %w", id, err)
	}
	return nil
}

// Dataset is a named collection of sources the trainer reads.
type Dataset struct {
	ID      int64
	Name    string
	Kind    string // text, completions, chat, documents, decision
	Created time.Time
	Sources []DatasetSource // filled by Dataset and Datasets
}

// DatasetSource is one file or watched folder of a dataset, with what the
// last ingest of it found.
type DatasetSource struct {
	ID        int64
	DatasetID int64
	Path      string
	Kind      string // jsonl, folder
	Split     string // train, valid, test; empty for all
	Rows      int
	Problems  []Problem // rows that were skipped, and why
	Updated   time.Time
}

// Problem is one bad row of a source.
type Problem struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// CreateDataset adds a dataset (its Sources are ignored) and returns its id.
func (s *Store) CreateDataset(ctx context.Context, d Dataset) (int64, error) {
	if d.Created.IsZero() {
		d.Created = now()
	}
	id, err := s.insert(ctx, "INSERT INTO datasets (name, kind, created_at) VALUES (?, ?, ?)",
		d.Name, d.Kind, millis(d.Created))
	if err != nil {
		return 0, fmt.Errorf("store: create dataset %q: %w", d.Name, err)
	}
	return id, nil
}

// AddDatasetSource records a source of a dataset, or, for a path the dataset
// already has, replaces what the previous ingest found. It returns the id.
func (s *Store) AddDatasetSource(ctx context.Context, src DatasetSource) (int64, error) {
	if src.Updated.IsZero() {
		src.Updated = now()
	}
	problems, err := marshal(src.Problems)
	if err != nil {
		return 0, fmt.Errorf("store: dataset source %s: %w", src.Path, err)
	}
	var id int64
	err = s.w.QueryRowContext(ctx, `
		INSERT INTO dataset_sources (dataset_id, path, kind, split, rows, problems, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (dataset_id, path) DO UPDATE SET
			kind = excluded.kind, split = excluded.split, rows = excluded.rows,
			problems = excluded.problems, updated_at = excluded.updated_at
		RETURNING id`,
		src.DatasetID, src.Path, src.Kind, src.Split, src.Rows, problems, millis(src.Updated)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store: dataset %d: add source %s: %w", src.DatasetID, src.Path, err)
	}
	return id, nil
}

func scanDataset(r scanner) (Dataset, error) {
	var d Dataset
	var created sql.NullInt64
	err := r.Scan(&d.ID, &d.Name, &d.Kind, &created)
	d.Created = fromMillis(created)
	return d, err
}

func scanSource(r scanner) (DatasetSource, error) {
	var src DatasetSource
	var problems sql.NullString
	var updated sql.NullInt64
	if err := r.Scan(&src.ID, &src.DatasetID, &src.Path, &src.Kind, &src.Split, &src.Rows, &problems, &updated); err != nil {
		return src, err
	}
	src.Updated = fromMillis(updated)
	return src, unmarshal(problems, &src.Problems)
}

const sourceCols = "id, dataset_id, path, kind, split, rows, problems, updated_at"

// Datasets lists every dataset, newest first, with its sources.
func (s *Store) Datasets(ctx context.Context) ([]Dataset, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT id, name, kind, created_at FROM datasets ORDER BY id DESC")
	ds, err := collect(rows, err, scanDataset)
	if err != nil {
		return nil, fmt.Errorf("store: datasets: %w", err)
	}
	rows, err = s.r.QueryContext(ctx, "SELECT "+sourceCols+" FROM dataset_sources ORDER BY dataset_id, id")
	srcs, err := collect(rows, err, scanSource)
	if err != nil {
		return nil, fmt.Errorf("store: dataset sources: %w", err)
	}
	byID := make(map[int64]*Dataset, len(ds))
	for i := range ds {
		byID[ds[i].ID] = &ds[i]
	}
	for _, src := range srcs {
		if d := byID[src.DatasetID]; d != nil { // nil only if it was added between the two queries
			d.Sources = append(d.Sources, src)
		}
	}
	return ds, nil
}

// Dataset returns one dataset with its sources, or ErrNotFound.
func (s *Store) Dataset(ctx context.Context, id int64) (Dataset, error) {
	d, err := one(scanDataset(s.r.QueryRowContext(ctx, "SELECT id, name, kind, created_at FROM datasets WHERE id = ?", id)))
	if err == nil {
		rows, qerr := s.r.QueryContext(ctx, "SELECT "+sourceCols+" FROM dataset_sources WHERE dataset_id = ? ORDER BY id", id)
		d.Sources, err = collect(rows, qerr, scanSource)
	}
	if err != nil {
		return Dataset{}, fmt.Errorf("store: dataset %d: %w", id, err)
	}
	return d, nil
}

// DeleteDataset removes a dataset and its sources; runs keep its name.
func (s *Store) DeleteDataset(ctx context.Context, id int64) error {
	if err := s.exec(ctx, "DELETE FROM datasets WHERE id = ?", id); err != nil {
		return fmt.Errorf("store: delete dataset %d: %w", id, err)
	}
	return nil
}
