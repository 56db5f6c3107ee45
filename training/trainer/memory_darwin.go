package trainer

import (
	"encoding/binary"
	"syscall"
)

// availableMemory is the machine's physical memory (hw.memsize): on Apple
// silicon the GPU shares it, and macOS frees caches on demand.
func availableMemory() int64 {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil {
		return 0
	}
	b := []byte(s)
	for len(b) < 8 { // Sysctl drops a trailing zero byte
		b = append(b, 0)
	}
	return int64(binary.LittleEndian.Uint64(b[:8]))
}
