//go:build cgo && (darwin || linux)

package mlx

/*
#cgo linux LDFLAGS: -ldl -lm
#include <stdlib.h>
#include "mlxc.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	mx "github.com/inloop/inloop/mlxbridge"
)

// MinVersion is the oldest mlx-c the backend accepts: mlx_quantize and
// mlx_dequantize gained their global_scale argument in 0.6.0, and our declarations
// use the 0.6.0 signatures. Older libraries are refused rather than miscalled.
const MinVersion = "0.6.0"

// libName is the shared library's file name on this system.
func libName() string {
	if runtime.GOOS == "darwin" {
		return "libmlxc.dylib"
	}
	return "libmlxc.so"
}

// candidates lists where to look for libmlxc, in order. $MLXC_LIB, when set, is
// the only candidate: a user who names a file wants that file or an error.
func candidates() []string {
	if p := os.Getenv("MLXC_LIB"); p != "" {
		return []string{p}
	}
	name := libName()
	var out []string
	if runtime.GOOS == "darwin" {
		if exe, err := os.Executable(); err == nil {
			// Inloop.app/Contents/MacOS/inloop -> Inloop.app/Contents/Frameworks
			out = append(out, filepath.Join(filepath.Dir(exe), "..", "Frameworks", name))
		}
		out = append(out, filepath.Join("/opt/homebrew/lib", name))
	}
	out = append(out, filepath.Join("/usr/local/lib", name), name) // bare name: the system loader's search
	return out
}

// library is an opened libmlxc with its symbols bound.
type library struct {
	path    string
	version string // mlx_version: the MLX release the library was built against
}

// openLibrary dlopens path and checks it is an mlx-c of at least MinVersion. It
// binds nothing, so a refused library leaves no trace beyond the dlopen.
func openLibrary(path string) (lib unsafe.Pointer, version string, err error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	h := C.mlxc_open(cpath, &msg[0], C.size_t(len(msg)))
	if h == nil {
		e := C.GoString(&msg[0])
		if !strings.Contains(e, path) { // dlerror usually names the file itself
			e = path + ": " + e
		}
		return nil, "", errors.New(e)
	}
	has := func(name string) bool {
		cn := C.CString(name)
		defer C.free(unsafe.Pointer(cn))
		return C.mlxc_has(h, cn) != 0
	}
	var vbuf [128]C.char
	C.mlxc_lib_version(h, &vbuf[0], C.size_t(len(vbuf)))
	version = C.GoString(&vbuf[0])
	if !has("mlx_version") || !has("mlx_array_new_data") {
		C.mlxc_close(h)
		return nil, "", fmt.Errorf("load %s: not an mlx-c library (no mlx_version)", path)
	}
	if probe := C.GoString(C.mlxc_probe_symbol); !has(probe) {
		C.mlxc_close(h)
		return nil, version, fmt.Errorf("load %s: mlx-c is older than %s (MLX %s; it lacks %s); upgrade with `brew upgrade mlx-c`",
			path, MinVersion, version, probe)
	}
	return h, version, nil
}

// loadLibrary tries each candidate and binds the first usable one. Errors wrap
// mx.ErrUnavailable so that "auto" falls back to another backend.
func loadLibrary(paths []string) (*library, error) {
	var msgs []string
	for _, p := range paths {
		h, version, err := openLibrary(p)
		if err != nil {
			msgs = append(msgs, err.Error())
			continue
		}
		if missing := C.mlxc_bind(h); missing != nil {
			C.mlxc_close(h)
			msgs = append(msgs, fmt.Sprintf("load %s: missing symbol %s", p, C.GoString(missing)))
			continue
		}
		return &library{path: p, version: version}, nil
	}
	return nil, fmt.Errorf("mlx: no usable libmlxc (brew install mlx-c, or set MLXC_LIB): %s: %w",
		strings.Join(msgs, "; "), mx.ErrUnavailable)
}
