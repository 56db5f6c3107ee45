package app

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// --kernel chooses whose rounding the folder holds; the help says which is the
// default and what each means, and a wrong name is refused before any work.
func TestQuantizeKernelFlag(t *testing.T) {
	dir := tinyModelDir(t)
	var out, errb bytes.Buffer
	Main([]string{"quantize", "-h"}, &out, &errb)
	help := out.String() + errb.String()
	for _, want := range []string{"-kernel", "gpu", "cpu", `(default "gpu")`, "mlx_lm.convert"} {
		if !strings.Contains(help, want) {
			t.Errorf("quantize help lacks %q:\n%s", want, help)
		}
	}
	out.Reset()
	errb.Reset()
	dst := filepath.Join(t.TempDir(), "q-cpu")
	if code := Main([]string{"quantize", "--model", dir, "--out", dst, "--bits", "8", "--group-size", "32", "--kernel", "cpu", "--backend", "cpu", "--data-dir", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("quantize --kernel cpu exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "cpu kernel rounding") {
		t.Errorf("the report does not say which kernel's rounding it wrote:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := Main([]string{"quantize", "--model", dir, "--out", filepath.Join(t.TempDir(), "q"), "--kernel", "metal", "--data-dir", t.TempDir()}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "want gpu or cpu") {
		t.Errorf("--kernel metal: exit %d, %s", code, errb.String())
	}
}
