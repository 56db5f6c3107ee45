//go:build unix

package safetensors

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps a regular file read-only. A zero-length file gets an empty
// buffer (mmap refuses length 0) so the parser reports it as too short.
func mapFile(path string) ([]byte, func([]byte) error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close() // the mapping outlives the descriptor
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, nil, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	buf, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return buf, syscall.Munmap, nil
}
