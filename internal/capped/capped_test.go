package capped

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit   int64
		wantErr string // "" for success
	}{
		{1000, ""},
		{100, ""},
		{99, path + ": 100 bytes, over the 99-byte limit"},
		{0, path + ": 100 bytes, over the 0-byte limit"},
	} {
		got, err := ReadFile(path, c.limit)
		switch {
		case c.wantErr == "" && (err != nil || len(got) != 100):
			t.Errorf("limit %d: got %d bytes, %v; want 100 bytes", c.limit, len(got), err)
		case c.wantErr != "" && (err == nil || err.Error() != c.wantErr || !errors.Is(err, ErrTooLarge)):
			t.Errorf("limit %d: got error %v, want %q matching ErrTooLarge", c.limit, err, c.wantErr)
		}
		var tl *TooLargeError
		if c.wantErr != "" && (!errors.As(err, &tl) || tl.Size != 100 || tl.Limit != c.limit || tl.Name != path) {
			t.Errorf("limit %d: got %#v, want size 100, limit %d, name %s", c.limit, tl, c.limit, path)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}

// A file whose size the file system does not report (a device, a pipe) is
// stopped by the byte count.
func TestReadFileWithoutSize(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	_, err := ReadFile("/dev/zero", 1<<16)
	if want := "/dev/zero: more than the 65536-byte limit"; err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestReader(t *testing.T) {
	for _, c := range []struct {
		in      string
		limit   int64
		wantErr bool
	}{
		{"", 0, false}, {"abc", 3, false}, {"abc", 2, true}, {"abc", 0, true}, {"abc", 100, false},
	} {
		// A one-byte reader exercises the boundary read by read.
		got, err := io.ReadAll(NewReader(iotest.OneByteReader(strings.NewReader(c.in)), c.limit, "stream"))
		if c.wantErr {
			var tl *TooLargeError
			if !errors.As(err, &tl) || tl.Name != "stream" || tl.Size != -1 || tl.Limit != c.limit {
				t.Errorf("%q limit %d: got %v, want a TooLargeError", c.in, c.limit, err)
			}
			if int64(len(got)) > c.limit {
				t.Errorf("%q limit %d: passed on %d bytes, more than the limit", c.in, c.limit, len(got))
			}
			continue
		}
		if err != nil || string(got) != c.in {
			t.Errorf("%q limit %d: got %q, %v; want %q", c.in, c.limit, got, err, c.in)
		}
	}
	if _, err := ReadAll(strings.NewReader("abcdef"), 5, "file list"); err == nil || err.Error() != "file list: more than the 5-byte limit" {
		t.Errorf("ReadAll: got %v", err)
	}
}

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.jsonl")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, 9); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "10 bytes, over the 9-byte limit") {
		t.Errorf("got %v, want the sizes in an ErrTooLarge", err)
	}
	rc, err := Open(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || string(got) != "0123456789" {
		t.Errorf("got %q, %v", got, err)
	}
}
