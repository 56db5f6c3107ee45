// Package capped reads files and streams whole, up to a size limit. Model
// folders, tokenizers, templates, checkpoints and downloads are untrusted
// input: a config.json of 40 GB, a FIFO or /dev/zero must give a clear error
// naming the file and the limit, not exhaust memory. It is the one home for
// the "stat, LimitReader(limit+1), compare" recipe the project had copied six
// times with six different error messages.
package capped

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is matched (errors.Is) by every error this package returns for
// input over its limit; the error itself is a *TooLargeError.
var ErrTooLarge = errors.New("over the size limit")

// TooLargeError reports input over its limit.
type TooLargeError struct {
	Name  string // the file's path, or what the caller named the stream
	Size  int64  // the file's size; -1 where only "more than Limit" is known (a stream, a growing file)
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: more than the %d-byte limit", e.Name, e.Limit)
	}
	return fmt.Sprintf("%s: %d bytes, over the %d-byte limit", e.Name, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// ReadFile reads the file at path whole, refusing one of more than limit bytes
// with a *TooLargeError. A file that grows past limit while it is read is
// refused too. Errors from opening the file are returned as os.Open gives
// them, so errors.Is(err, fs.ErrNotExist) works.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, size, err := open(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if size >= 0 {
		buf.Grow(int(size) + bytes.MinRead) // one read past the end sees EOF without growing
	}
	if _, err := buf.ReadFrom(NewReader(f, limit, path)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Open opens the file at path for streaming, refusing at once a file of more
// than limit bytes; reads from the result fail with a *TooLargeError past
// limit, in case the file grows.
func Open(path string, limit int64) (io.ReadCloser, error) {
	f, _, err := open(path, limit)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{NewReader(f, limit, path), f}, nil
}

// open opens path and checks its size where the file system knows it; size
// is -1 for files that have none (pipes, devices).
func open(path string, limit int64) (f *os.File, size int64, err error) {
	f, err = os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return f, -1, nil
	}
	if fi.Size() > limit {
		f.Close()
		return nil, 0, &TooLargeError{Name: path, Size: fi.Size(), Limit: limit}
	}
	return f, fi.Size(), nil
}

// ReadAll reads r to its end, refusing more than limit bytes with a
// *TooLargeError that names the input name.
func ReadAll(r io.Reader, limit int64, name string) ([]byte, error) {
	return io.ReadAll(NewReader(r, limit, name))
}

// NewReader returns a reader that passes on at most limit bytes of r and then,
// if r has more, fails with a *TooLargeError naming name. Input of exactly
// limit bytes reads to a clean io.EOF.
func NewReader(r io.Reader, limit int64, name string) io.Reader {
	return &reader{r: r, left: limit, name: name, limit: limit}
}

type reader struct {
	r     io.Reader
	left  int64 // bytes still allowed; -1 once r is known to hold more
	name  string
	limit int64
}

func (c *reader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.tooLarge()
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1] // one byte past the limit tells "exactly limit" from "more"
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		n, c.left = int(c.left), -1
		return n, c.tooLarge()
	}
	c.left -= int64(n)
	return n, err
}

func (c *reader) tooLarge() error {
	return &TooLargeError{Name: c.name, Size: -1, Limit: c.limit}
}
