package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteFileReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	for _, want := range []string{"first", "second, longer than the first"} {
		if err := WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	assertOnly(t, filepath.Dir(path), "config.json")
}

func TestWriteFailingMidwayKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := WriteFile(path, []byte("old weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := WriteFunc(path, 0o644, func(w io.Writer) error {
		if _, err := w.Write(make([]byte, 1<<20)); err != nil { // past the buffer: bytes reach the temp file
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got error %v, want one wrapping %v", err, boom)
	}
	if got, _ := os.ReadFile(path); string(got) != "old weights" {
		t.Errorf("after a failed write the file holds %d bytes %.20q, want the old content", len(got), got)
	}
	assertOnly(t, dir, "model.safetensors")
}

func TestWriteFilePermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows has no Unix permission bits")
	}
	path := filepath.Join(t.TempDir(), "adapter_config.json")
	for _, perm := range []os.FileMode{0o600, 0o644, 0o640} {
		if err := WriteFile(path, []byte("{}"), perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != perm {
			t.Errorf("got mode %v, want %v", got, perm)
		}
	}
}

func TestWriteFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "weights")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(sub, []byte("x"), 0o644); err == nil {
		t.Fatal("writing over a folder: got no error")
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("the folder was replaced: %v, %v", fi, err)
	}
	assertOnly(t, dir, "weights")
}

func TestWriteFileMissingFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent", "config.json")
	err := WriteFile(path, []byte("x"), 0o644)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want an error wrapping os.ErrNotExist", err)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "absent")); runtime.GOOS != "windows" && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want os.ErrNotExist", err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := SyncDirIn(root, "sub"); err != nil {
		t.Error(err)
	}
	if err := SyncDirIn(root, "../"); runtime.GOOS != "windows" && err == nil {
		t.Error("SyncDirIn reached outside its root")
	}
}

// assertOnly fails unless dir holds exactly the named entries: no temporary
// file may be left behind.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range des {
		got = append(got, de.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("folder holds %q, want %q", got, names)
	}
	for i := range got {
		if got[i] != names[i] {
			t.Fatalf("folder holds %q, want %q", got, names)
		}
	}
}

// Everything written for the user has the same permissions, whatever the umask.
func TestNormalPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	old := syscallUmask(0o077) // the strictest common umask: os.MkdirTemp and plain creates would give 0700/0600
	defer syscallUmask(old)
	parent := t.TempDir()
	dir, err := MkdirTemp(parent, ".out-")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(parent, "src.json")
	if err := os.WriteFile(src, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "config.json"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := CopyFile(src, filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: DirPerm, filepath.Join(dir, "config.json"): Perm, filepath.Join(dir, "tokenizer.json"): Perm} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), got, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json")); string(got) != "{}" {
		t.Errorf("copy holds %q", got)
	}
	if err := CopyFile(parent, filepath.Join(dir, "x")); err == nil {
		t.Error("copying a folder succeeded")
	}
}

// ReplaceDir swaps a filled folder into place: the old contents go, the new
// ones are there, and nothing is left beside it.
func TestReplaceDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "model")
	for i, content := range []string{"first", "second"} {
		tmp, err := MkdirTemp(parent, ".tmp-model-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, fmt.Sprint("f", i)), []byte(content), Perm); err != nil {
			t.Fatal(err)
		}
		if err := ReplaceDir(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "f1" {
		t.Errorf("dir holds %v, want only the second folder's file", ents)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Errorf("left beside it: %v", ents)
	}
}
