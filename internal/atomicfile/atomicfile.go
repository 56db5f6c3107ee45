// Package atomicfile replaces files so that a crash, a full disk or a failed
// write leaves either the old file or the complete new one, never a torn mix:
// models, adapters, tokenizers and configs are written into a temporary file in
// the same folder, synced, renamed over the target, and the folder synced so
// the rename itself survives a power cut. It is the one home for this recipe,
// which the project had copied five times (two copies without the fsync).
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Perm and DirPerm are the permissions of everything Inloop writes for the user
// (model folders, adapters, configs, tokenizers): readable by everyone, as
// mlx-lm's and Hugging Face's files are, whatever the umask or a temporary
// file's 0600 would give. One value, so no file of a folder differs from the rest.
const (
	Perm    fs.FileMode = 0o644
	DirPerm fs.FileMode = 0o755
)

// Write is WriteFile with Perm, the call for any file written for the user.
func Write(path string, data []byte) error { return WriteFile(path, data, Perm) }

// WriteFile writes data to path atomically. The file ends with exactly the
// permissions perm (the umask does not apply), whatever the old file had.
// path must be a regular file or absent: a folder, link or device there is
// refused rather than replaced.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return WriteFunc(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc is WriteFile for content that is streamed: write gets a buffered
// writer on the temporary file. If write returns an error, nothing is renamed,
// the temporary file is removed and path keeps what it had.
func WriteFunc(path string, perm fs.FileMode, write func(w io.Writer) error) (err error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("write %s: exists and is not a regular file (%s)", path, fi.Mode().Type())
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// MkdirTemp creates a new folder in parent, named from pattern as os.MkdirTemp
// does, with DirPerm rather than MkdirTemp's 0700: a folder assembled there and
// renamed into place has the permissions of every other folder Inloop writes.
func MkdirTemp(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, DirPerm); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// ReplaceDir puts the filled folder tmp in dir's place, so that dir holds the
// old contents or the new ones, never a mixture: an existing dir is renamed
// aside (hidden, beside it), tmp renamed to dir, and the old one removed; if
// the second rename fails the old folder is put back. tmp must be on dir's
// file system (made with MkdirTemp in dir's parent, say) and synced.
func ReplaceDir(tmp, dir string) error {
	parent := filepath.Dir(dir)
	var old string
	if _, err := os.Lstat(dir); err == nil {
		old = filepath.Join(parent, fmt.Sprintf(".old-%s-%d-%d", filepath.Base(dir), os.Getpid(), time.Now().UnixNano()))
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			os.Rename(old, dir) // put the previous folder back
		}
		return err
	}
	if err := SyncDir(parent); err != nil {
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return nil
}

// CopyFile copies the regular file src to dst atomically, with Perm.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("copy %s: not a regular file (%s)", src, fi.Mode().Type())
	}
	return WriteFunc(dst, Perm, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// SyncDir makes the entries of dir durable: a file created, renamed or removed
// in it survives a crash once SyncDir returns. Windows cannot open a folder
// for syncing and orders renames itself; some file systems (network and FUSE
// mounts) refuse to sync a folder with EINVAL, and there the rename is as
// durable as it can be made. Both count as success.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return syncClose(d)
}

// SyncDirIn is SyncDir for a folder named relative to root, for callers that
// keep every file operation inside an os.Root.
func SyncDirIn(root *os.Root, dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	return syncClose(d)
}

func syncClose(d *os.File) error {
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err // a *PathError naming the folder
	}
	return nil
}
