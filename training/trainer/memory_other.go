//go:build !darwin

package trainer

// availableMemory is MemAvailable on Linux, and unknown (0) elsewhere.
func availableMemory() int64 { return meminfoAvailable() }
