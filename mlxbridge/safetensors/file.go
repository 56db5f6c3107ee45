package safetensors

import (
	"fmt"
	"maps"
	"slices"
)

// File is an opened, validated safetensors file. Its methods may be called
// from several goroutines at once, but not concurrently with Close.
type File struct {
	path     string
	buf      []byte // the whole file: mapped by Open, the caller's buffer for Parse
	data     []byte // the data region, a view into buf
	infos    map[string]TensorInfo
	names    []string // sorted
	metadata map[string]string
	release  func([]byte) error // unmaps buf; nil when there is nothing to release
	closed   bool
}

// Open maps the file at path into memory and validates its header. Nothing
// but the header is read until a tensor's Data is used.
func Open(path string) (*File, error) {
	buf, release, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := parser{path: path}.parse(buf)
	if err != nil {
		if release != nil {
			release(buf)
		}
		return nil, err
	}
	f.release = release
	return f, nil
}

// Close unmaps the file. Slices returned by Data must not be used after it.
// Closing twice is harmless.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	buf, release := f.buf, f.release
	f.buf, f.data, f.release = nil, nil, nil
	if release == nil {
		return nil
	}
	if err := release(buf); err != nil {
		return fmt.Errorf("safetensors: %s: unmap: %w", f.path, err)
	}
	return nil
}

// Path is the path the file was opened from, empty for Parse.
func (f *File) Path() string { return f.path }

// Names lists the tensors, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Len is the number of tensors.
func (f *File) Len() int { return len(f.names) }

// Info describes the named tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	ti, ok := f.infos[name]
	ti.Shape = slices.Clone(ti.Shape) // callers may reshape their copy
	return ti, ok
}

// Data is the named tensor's raw little-endian bytes, exactly
// numel*dtype.Size() of them. It is a read-only view into the file, valid
// until Close; writing to it faults for a file opened with Open.
func (f *File) Data(name string) ([]byte, error) {
	if f.closed {
		return nil, fmt.Errorf("%w: %s", ErrClosed, f.path)
	}
	ti, ok := f.infos[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, quoteName(name), f.describe())
	}
	return f.data[ti.Begin:ti.End:ti.End], nil
}

// Metadata is a copy of the file's __metadata__ map; nil when it has none.
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

func (f *File) describe() string {
	if f.path == "" {
		return "buffer"
	}
	return f.path
}
