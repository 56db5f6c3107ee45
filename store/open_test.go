package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// open opens a store in a fresh temporary folder, closed when the test ends.
func open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "inloop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// rawSQL runs statements on path through the driver alone, bypassing the store.
func rawSQL(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// filledDB makes a real store file with enough rows to span many pages, closed.
func filledDB(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := s.CreateRun(ctx, Run{Kind: KindTrain, Model: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	var ms []Metric
	for step := range 3000 {
		ms = append(ms, Metric{RunID: id, Step: step, Name: "loss", Value: float64(step)})
	}
	if err := s.AddMetrics(ctx, ms); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A damaged file, or one from a newer Inloop, is refused with an error that
// names it, and its bytes are left exactly as they were.
func TestOpenRefusesWithoutWriting(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want error
	}{
		{"random bytes", func(t *testing.T, path string) {
			b := make([]byte, 8192)
			for i := range b {
				b[i] = byte(i*7919 + i/13)
			}
			writeFile(t, path, b)
		}, ErrCorrupt},
		{"text file", func(t *testing.T, path string) {
			writeFile(t, path, []byte("these are my notes, not a database\n"))
		}, ErrCorrupt},
		{"zeroed header", func(t *testing.T, path string) {
			filledDB(t, path)
			b := readFile(t, path)
			clear(b[:100])
			writeFile(t, path, b)
		}, ErrCorrupt},
		{"truncated", func(t *testing.T, path string) {
			filledDB(t, path)
			b := readFile(t, path)
			writeFile(t, path, b[:len(b)/2])
		}, ErrCorrupt},
		{"garbled pages", func(t *testing.T, path string) {
			filledDB(t, path)
			b := readFile(t, path)
			for i := 4096; i < len(b); i += 4096 { // every page after the first keeps its number, loses its content
				copy(b[i+8:i+64], bytes.Repeat([]byte{0xA5}, 56))
			}
			writeFile(t, path, b)
		}, ErrCorrupt},
		{"newer schema", func(t *testing.T, path string) {
			rawSQL(t, path, "CREATE TABLE future (x)", "PRAGMA user_version = 999")
		}, ErrNewerSchema},
		{"newer schema in WAL mode", func(t *testing.T, path string) {
			filledDB(t, path)
			rawSQL(t, path, "PRAGMA journal_mode = WAL", "PRAGMA user_version = 999")
		}, ErrNewerSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inloop.db")
			tt.make(t, path)
			before := readFile(t, path)
			for range 2 { // a second try finds the same file and the same answer
				s, err := Open(path)
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded")
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
				t.Log(err)
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name %s", err, path)
				}
				if after := readFile(t, path); !bytes.Equal(before, after) {
					t.Fatalf("the file changed: %d bytes before, %d after", len(before), len(after))
				}
			}
		})
	}
}

// Another program's SQLite file is not taken for ours.
func TestOpenRefusesForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	rawSQL(t, path, "PRAGMA application_id = 42", "CREATE TABLE t (x)", "PRAGMA user_version = 1")
	before := readFile(t, path)
	if s, err := Open(path); err == nil {
		s.Close()
		t.Fatal("Open succeeded")
	} else if !strings.Contains(err.Error(), "not an Inloop database") || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v", err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("the file changed")
	}
}

// Opening again applies nothing twice; an empty file (left by a crash before
// the first commit) becomes a fresh database.
func TestMigrationsIdempotent(t *testing.T) {
	for _, empty := range []bool{false, true} {
		t.Run(fmt.Sprintf("empty file %v", empty), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a?b#c%d dir", "inloop.db")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if empty {
				writeFile(t, path, nil)
			}
			for round := range 3 {
				s, err := Open(path)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				var version, fk int
				var mode string
				if err := s.w.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
					t.Fatal(err)
				}
				if err := s.w.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil {
					t.Fatal(err)
				}
				if err := s.r.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
					t.Fatal(err)
				}
				if version != SchemaVersion() || version != len(migrations) || fk != 1 || mode != "wal" {
					t.Fatalf("round %d: got version %d, foreign_keys %d, journal %s; want %d, 1, wal",
						round, version, fk, mode, len(migrations))
				}
				if _, err := s.CreateChat(context.Background(), Chat{Title: "x"}); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			des, _ := os.ReadDir(filepath.Dir(path))
			if len(des) != 1 {
				t.Errorf("after Close the folder holds %d files, want only inloop.db", len(des))
			}
		})
	}
}

// The read pool cannot write, so a query on it can never take the write lock.
func TestReadersCannotWrite(t *testing.T) {
	s := open(t)
	if _, err := s.r.Exec("INSERT INTO chats (title, created_at) VALUES ('x', 0)"); err == nil {
		t.Fatal("a write through the read pool succeeded")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
