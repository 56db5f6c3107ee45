// Package mlx is mlxbridge's backend on Apple's MLX, through the mlx-c library:
// Metal on Apple-silicon Macs, with unified memory, so model and training code
// written against mlxbridge runs on the GPU unchanged.
//
// libmlxc is loaded at run time with dlopen, never linked, so the project builds
// and tests on machines without it. The search order is $MLXC_LIB (then the only
// candidate), the app bundle's Contents/Frameworks next to the executable
// (macOS), /opt/homebrew/lib (macOS), /usr/local/lib, and finally the system
// loader's own search for libmlxc.dylib or libmlxc.so. mlx-c older than
// MinVersion is refused with a message saying so. On a Mac: brew install mlx-c.
//
// Import it for its side effect of registering the "mlx" backend, which "auto"
// prefers; when no library loads, opening it fails with an error wrapping
// mlxbridge.ErrUnavailable and "auto" falls back to the next backend (cpu):
//
//	import _ "github.com/inloop/inloop/mlxbridge/mlx"
//
// Every MLX call runs on one goroutine locked to its own OS thread (MLX's streams
// are per thread, and the GUI's main thread must never wait on the GPU); calls
// from any goroutine are handed to it. The function given to ValueAndGrad runs on
// that thread while MLX traces it and may call any op, but must not wait on other
// goroutines that use the backend. Arrays are freed when their Go values become
// unreachable; Free and Sweep release memory sooner (see memory.go).
package mlx
