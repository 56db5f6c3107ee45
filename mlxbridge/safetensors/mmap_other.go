//go:build !unix

package safetensors

import (
	"fmt"
	"io"
	"math"
	"os"
)

// mapFile reads the whole file where mmap is not available. The size comes
// from the file system, not from the file's contents, so it is safe to
// allocate.
func mapFile(path string) ([]byte, func([]byte) error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to read", path, st.Size())
	}
	buf := make([]byte, st.Size())
	if _, err := io.ReadFull(fh, buf); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf, nil, nil
}
