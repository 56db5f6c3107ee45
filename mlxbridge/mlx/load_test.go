//go:build cgo && (darwin || linux)

package mlx

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// These tests need no MLX: they check how the loader reports libraries it cannot use.

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libmlxc.so")
	t.Setenv("MLXC_LIB", path)
	if got := candidates(); len(got) != 1 || got[0] != path {
		t.Fatalf("with MLXC_LIB set, candidates are %v, want only %s", got, path)
	}
	_, err := loadLibrary(candidates())
	if err == nil {
		t.Fatal("loading a missing file succeeded")
	}
	if !errors.Is(err, mx.ErrUnavailable) {
		t.Errorf("error %q does not wrap ErrUnavailable, so auto would not fall back", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "MLXC_LIB") || strings.Contains(msg, "\n") {
		t.Errorf("error %q should be one line naming the file and MLXC_LIB", msg)
	}
	t.Log(err)
}

func TestCandidates(t *testing.T) {
	t.Setenv("MLXC_LIB", "")
	got := candidates()
	if last := got[len(got)-1]; last != libName() {
		t.Errorf("last candidate %q, want the bare name %q for the system loader", last, libName())
	}
	joined := strings.Join(got, " ")
	for _, want := range []string{"/usr/local/lib/"} {
		if !strings.Contains(joined, want) {
			t.Errorf("candidates %v miss %s", got, want)
		}
	}
	if runtime.GOOS == "darwin" && (!strings.Contains(joined, "/opt/homebrew/lib/") || !strings.Contains(joined, "Frameworks")) {
		t.Errorf("candidates %v miss Homebrew or the app bundle", got)
	}
}

func TestLoadNotMLX(t *testing.T) {
	lib := "libc.so.6"
	if runtime.GOOS == "darwin" {
		lib = "/usr/lib/libSystem.B.dylib"
	}
	_, _, err := openLibrary(lib)
	if err == nil || !strings.Contains(err.Error(), "not an mlx-c library") {
		t.Errorf("opening %s: got %v, want a not-mlx-c error", lib, err)
	}
}

// fakeLib is a stand-in libmlxc that reports version 0.5.0 and, unless probe is
// set, lacks the symbol that first appeared in mlx-c 0.6.0.
const fakeLib = `
typedef struct { void* ctx; } str;
static const char* v = "0.5.0";
int mlx_version(str* s) { s->ctx = (void*)v; return 0; }
str mlx_string_new(void) { str s = {0}; return s; }
const char* mlx_string_data(str s) { return (const char*)s.ctx; }
int mlx_string_free(str s) { return 0; }
void* mlx_array_new_data(void) { return 0; }
#ifdef PROBE
int mlx_bartlett(void) { return 0; }
#endif
`

func buildFake(t *testing.T, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler to build a fake libmlxc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(src, []byte(fakeLib), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, libName())
	args := append([]string{"-shared", "-fPIC", "-o", out, src}, defines...)
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Skipf("cannot build a fake libmlxc: %v: %s", err, msg)
	}
	return out
}

func TestLoadRefusesOldVersion(t *testing.T) {
	path := buildFake(t)
	_, version, err := openLibrary(path)
	if err == nil {
		t.Fatal("a library without the 0.6.0 probe symbol was accepted")
	}
	if version != "0.5.0" || !strings.Contains(err.Error(), "older than "+MinVersion) || !strings.Contains(err.Error(), "0.5.0") {
		t.Errorf("got version %q and error %q; want 0.5.0 and an older-than-%s error", version, err, MinVersion)
	}
	t.Log(err)
}

func TestLoadReportsMissingSymbol(t *testing.T) {
	path := buildFake(t, "-DPROBE")
	_, err := loadLibrary([]string{path})
	if err == nil || !strings.Contains(err.Error(), "missing symbol mlx_") || !errors.Is(err, mx.ErrUnavailable) {
		t.Errorf("got %v, want a missing-symbol error wrapping ErrUnavailable", err)
	}
	t.Log(err)
}

func TestAutoFallsBack(t *testing.T) {
	if _, err := Open(); err == nil {
		t.Skip("libmlxc loads here, so auto picks mlx")
	}
	b, err := mx.Open("mlx")
	if err == nil || !errors.Is(err, mx.ErrUnavailable) {
		t.Errorf("Open(mlx) without a library: got %v, %v; want ErrUnavailable", b, err)
	}
	t.Setenv("INLOOP_BACKEND", "")
	if b, err := mx.Open("auto"); err != nil || b.Name() != "cpu" { // cpu is registered by cross_test's import
		t.Errorf("auto without a library: got %v, %v; want the cpu backend", b, err)
	}
}
