package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The schema is a numbered series of SQL files. A file, once released, never
// changes: a new table or column is a new file. PRAGMA user_version holds the
// number of the last one applied.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations holds the SQL of migrations/0001_*.sql, 0002_*.sql, ... in order;
// migrations[i] brings the schema from version i to i+1.
var migrations = loadMigrations()

func loadMigrations() []string {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, name := range names {
		num, _, _ := strings.Cut(path.Base(name), "_")
		if n, err := strconv.Atoi(num); err != nil || n != i+1 {
			panic(fmt.Sprintf("store: migration %s is out of sequence: want number %04d", name, i+1))
		}
		b, err := migrationFS.ReadFile(name)
		if err != nil {
			panic(err)
		}
		out[i] = string(b)
	}
	return out
}

// SchemaVersion is the schema version this build of the store writes.
func SchemaVersion() int { return len(migrations) }

// migrate applies the migrations the file lacks, each in its own transaction
// together with its user_version, so a crash leaves the schema at a version
// that exists.
func (s *Store) migrate(ctx context.Context) error {
	for {
		applied := false
		err := s.tx(ctx, func(tx *sql.Tx) error {
			var version int
			if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
				return err
			}
			if version > len(migrations) { // another process upgraded it since check
				return fmt.Errorf("%w (schema version %d, this version knows up to %d)",
					ErrNewerSchema, version, len(migrations))
			}
			if version == len(migrations) {
				return nil
			}
			if _, err := tx.ExecContext(ctx, migrations[version]); err != nil {
				return fmt.Errorf("migration %d: %w", version+1, err)
			}
			// PRAGMA takes no bound parameters; the values are our own integers.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version+1)); err != nil {
				return fmt.Errorf("migration %d: %w", version+1, err)
			}
			applied = true
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: %s: %w", s.path, err)
		}
		if !applied {
			return nil
		}
	}
}

// Times are stored as unix milliseconds; the zero time is NULL.
func millis(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func fromMillis(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64)
}

// now is the current time at the precision the store keeps, so that a value a
// method fills in compares equal to the same value read back.
func now() time.Time { return time.UnixMilli(time.Now().UnixMilli()) }

// rawJSON stores a JSON column; empty is NULL.
func rawJSON(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

func fromJSON(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.RawMessage(s.String)
}

// marshal stores a typed value as a JSON column; nil (or empty) is NULL.
func marshal(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return string(b), nil
}

func unmarshal(s sql.NullString, v any) error {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.Unmarshal([]byte(s.String), v)
}

// SQLite has no NaN: it stores one as NULL. Metric values and scores can be NaN
// (a diverged loss), so a NULL reads back as NaN.
func fromReal(f sql.NullFloat64) float64 {
	if !f.Valid {
		return math.NaN()
	}
	return f.Float64
}

// nullID stores an optional reference; 0 is NULL.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// collect reads every row of a query with scan.
func collect[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// one maps sql.ErrNoRows to ErrNotFound.
func one[T any](v T, err error) (T, error) {
	if err == sql.ErrNoRows {
		return v, ErrNotFound
	}
	return v, err
}
