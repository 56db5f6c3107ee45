// Package store keeps what Inloop must remember between runs of the app: the
// models it knows, datasets, training and other runs with their metrics and
// checkpoints, adapter versions, decision tasks and their calibrations, chats,
// feedback and adaptation events. It exists so that only one package writes SQL
// and every other layer (the app's Workspace, above all) works with typed rows.
//
// The database is one SQLite file (inloop.db) in WAL mode. One connection
// writes and a separate read-only pool reads, so a screen listing runs never
// holds up a trainer recording metrics. A committed row survives the process
// being killed. A file that is damaged, or was written by a newer Inloop, is
// refused with an error naming it and is never modified.
//
// The package is a leaf: it imports no other package of the project.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/mattn/go-sqlite3"
)

var (
	// ErrNotFound is returned (wrapped) when the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt is returned (wrapped) by Open when the file is not a readable
	// SQLite database or fails its integrity check. The file is left as it was.
	ErrCorrupt = errors.New("database file is corrupt")
	// ErrNewerSchema is returned (wrapped) by Open when the file was migrated by
	// a newer version of Inloop than this one. The file is left as it was.
	ErrNewerSchema = errors.New("database schema is newer than this version of Inloop knows")
)

// applicationID marks a SQLite file as Inloop's ("INLP"), so that a database
// belonging to another program is not mistaken for ours and migrated.
const applicationID = 0x494E4C50

// busyTimeoutMS is how long a statement waits for a lock held by another
// connection (another Inloop process, or a checkpoint) before failing.
const busyTimeoutMS = 5000

// Store is an open inloop.db. Its methods are safe for concurrent use.
type Store struct {
	path string
	w    *sql.DB // the single writer: MaxOpenConns(1), so writes queue in Go, not on SQLite locks
	r    *sql.DB // read-only pool; in WAL mode readers see the last commit and never block the writer
}

// Open opens the database at path, creating it if it does not exist, and
// brings its schema up to date. An existing file is checked before anything is
// written to it: a damaged file gives ErrCorrupt and a file from a newer
// Inloop gives ErrNewerSchema, both naming the path.
func Open(path string) (*Store, error) {
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("store: %s: not a regular file", path)
		}
		// An empty file holds nothing to protect: SQLite creates databases
		// that way, and a crash before the first commit leaves one behind.
		if fi.Size() > 0 {
			if err := check(path); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: %w", err)
	}

	w, err := sql.Open("sqlite3", dsn(path,
		"_journal_mode=WAL",
		"_synchronous=NORMAL", // with WAL, a commit survives a killed process; only power loss can undo the last ones
		"_foreign_keys=1",
		"_txlock=immediate", // take the write lock at BEGIN, so a transaction never fails to upgrade midway
		fmt.Sprintf("_busy_timeout=%d", busyTimeoutMS)))
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	s := &Store{path: path, w: w}
	if err := s.migrate(context.Background()); err != nil {
		w.Close()
		return nil, err
	}

	r, err := sql.Open("sqlite3", dsn(path,
		"mode=ro",
		"_query_only=1",
		"_foreign_keys=1",
		fmt.Sprintf("_busy_timeout=%d", busyTimeoutMS)))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	s.r = r
	if err := r.Ping(); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: %s: opening readers: %w", path, err)
	}
	return s, nil
}

// Path is the file the store was opened from.
func (s *Store) Path() string { return s.path }

// Close closes the readers, then the writer, which as the last connection
// folds the write-ahead log back into the main file.
func (s *Store) Close() error {
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: closing %s: %w", s.path, err)
	}
	return nil
}

// dsn builds a SQLite URI for path; escaping keeps a '?' or '#' in a folder
// name from being read as the start of the parameters.
func dsn(path string, params ...string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + strings.Join(params, "&")
}

// check inspects an existing file through a read-only connection, so that
// nothing (not even the switch to WAL mode) is written to a file we refuse.
func check(path string) error {
	db, err := sql.Open("sqlite3", dsn(path, "mode=ro", fmt.Sprintf("_busy_timeout=%d", busyTimeoutMS)))
	if err != nil {
		return fmt.Errorf("store: %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()

	var version, appID int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return classify(path, err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return classify(path, err)
	}
	if appID != 0 && appID != applicationID {
		return fmt.Errorf("store: %s: not an Inloop database (application_id %#x)", path, appID)
	}
	if version > len(migrations) {
		return fmt.Errorf("store: %s: %w (schema version %d, this version knows up to %d)",
			path, ErrNewerSchema, version, len(migrations))
	}

	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return classify(path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return classify(path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return classify(path, err)
	}
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], fmt.Sprintf("and %d more", len(problems)-3))
		}
		return fmt.Errorf("store: %s: %w: %s", path, ErrCorrupt, strings.Join(problems, "; "))
	}
	return nil
}

// classify turns SQLite's "not a database" and "malformed" errors into
// ErrCorrupt and keeps any other error (permissions, I/O) as it is.
func classify(path string, err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrNotADB || se.Code == sqlite3.ErrCorrupt) {
		return fmt.Errorf("store: %s: %w: %w", path, ErrCorrupt, err)
	}
	return fmt.Errorf("store: %s: %w", path, err)
}

// tx runs fn in one write transaction on the writer connection.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// insert runs one INSERT on the writer and returns the new row's id.
func (s *Store) insert(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.w.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// exec runs one UPDATE or DELETE on the writer; ErrNotFound if it touched no row.
func (s *Store) exec(ctx context.Context, query string, args ...any) error {
	res, err := s.w.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
