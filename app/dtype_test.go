package app

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
)

// --dtype reaches the model in generate, chat and train, and the Workspace loads
// (and shares) models in the dtype it was opened with or last set.
func TestDTypeFlag(t *testing.T) {
	ctx := context.Background()
	model := tinyModelDir(t)
	dataDir := t.TempDir()
	for _, cmd := range [][]string{
		{"generate", "--prompt", "hello", "--max-tokens", "3", "--temp", "0", "--dtype", "bfloat16"},
		{"generate", "--prompt", "hello", "--max-tokens", "3", "--temp", "0", "--dtype", "auto"},
		{"chat", "--max-tokens", "3", "--temp", "0", "--dtype", "float16"},
		{"train", "--data", tinyData(t), "--iters", "2", "--batch-size", "1", "--steps-per-eval", "-1", "--dtype", "bfloat16"},
	} {
		var out, errb bytes.Buffer
		args := append(cmd, "--model", model, "--backend", "cpu", "--data-dir", dataDir)
		if code := Run(ctx, args, strings.NewReader("hi\n/exit\n"), &out, &errb); code != 0 {
			t.Errorf("%v exited %d: %s", cmd, code, errb.String())
		}
		if cmd[0] == "train" && !strings.Contains(out.String()+errb.String(), "in bfloat16") {
			t.Errorf("train --dtype bfloat16 does not say so:\n%s", out.String())
		}
		var bad bytes.Buffer
		args[len(cmd)-1] = "int8"
		if code := Run(ctx, args, strings.NewReader(""), &out, &bad); code == 0 || !strings.Contains(bad.String(), "--dtype") {
			t.Errorf("%s --dtype int8: exit %d, %s", cmd[0], code, bad.String())
		}
	}

	w, err := Open(ctx, Options{DataDir: dataDir, Backend: "cpu", DType: "bfloat16"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dtypeOf := func(load func() (interface{ Params() map[string]*mx.Array }, error)) mx.DType {
		m, err := load()
		if err != nil {
			t.Fatal(err)
		}
		return m.Params()["model.norm.weight"].DType()
	}
	shared := func() (interface{ Params() map[string]*mx.Array }, error) {
		m, _, err := w.SharedModel(ctx, model)
		return m, err
	}
	if got := dtypeOf(shared); got != mx.BFloat16 || w.DType() != "bfloat16" {
		t.Errorf("Workspace opened with bfloat16 loads %s (says %s)", got, w.DType())
	}
	if err := w.SetDType("auto"); err != nil {
		t.Fatal(err)
	}
	if got := dtypeOf(shared); got != mx.Float32 { // the tiny model is stored in float32
		t.Errorf("after SetDType(auto) the shared model is %s, want the checkpoint's float32", got)
	}
	if err := w.SetDType("double"); err == nil {
		t.Error("SetDType accepted double")
	}
	if _, err := Open(ctx, Options{DataDir: filepath.Join(dataDir, "x"), Backend: "cpu", DType: "fp4"}); err == nil {
		t.Error("Open accepted dtype fp4")
	}
}

// --int8-decode reaches generate and chat, and the Workspace loads models with the
// choice it was opened with or last set; SetDType keeps it, and SetInt8Decode
// switches models already loaded and the copies open chats hold.
func TestInt8DecodeFlag(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "demo-q4")
	if _, err := inference.QuantizeModel(inferencetest.Demo(t), dir, 4, 64); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	for _, cmd := range [][]string{
		{"generate", "--prompt", "hello", "--max-tokens", "5", "--temp", "0", "--int8-decode"},
		{"chat", "--max-tokens", "5", "--temp", "0", "--int8-decode"},
	} {
		var out, errb bytes.Buffer
		args := append(cmd, "--model", dir, "--backend", "cpu", "--data-dir", dataDir)
		if code := Run(ctx, args, strings.NewReader("hi\n/exit\n"), &out, &errb); code != 0 {
			t.Errorf("%v exited %d: %s", cmd, code, errb.String())
		}
		if b, _ := mx.Open("cpu"); mx.HasQuantizedA8(b, 4) && !strings.Contains(errb.String(), "tok/s (int8)") {
			t.Errorf("%v: the stats line does not say the decode ran on 8-bit activations:\n%s", cmd, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"generate", "--prompt", "hello", "--max-tokens", "3", "--model", dir, "--backend", "cpu", "--data-dir", dataDir}, strings.NewReader(""), &out, &errb); code != 0 || strings.Contains(errb.String(), "(int8)") {
		t.Errorf("generate without --int8-decode: exit %d, stats %s", code, errb.String())
	}
	workspaceChoice(t, dataDir, dir, Options{Int8Decode: true}, (*inference.Model).Int8Decode, (*Workspace).Int8Decode, (*Workspace).SetInt8Decode)
}

// --int8-prefill reaches generate, whose stats line says the prompt was read on
// 8-bit activations where the backend can (and not otherwise, nor without the
// flag); the Workspace loads models with the choice, SetDType keeps it, and
// SetInt8Prefill switches loaded models and open chats' copies, leaving the decode
// choice alone.
func TestInt8PrefillFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo-q4")
	if _, err := inference.QuantizeModel(inferencetest.Demo(t), dir, 4, 64); err != nil {
		t.Fatal(err)
	}
	b, _ := mx.Open("cpu")
	prefillFlag(t, dir, "int8", mx.HasQuantizedA8Rows(b, 4), Options{Int8Prefill: true},
		(*inference.Model).Int8Prefill, (*Workspace).Int8Prefill, (*Workspace).SetInt8Prefill)
}

// workspaceChoice checks one rounded-activation choice of a Workspace opened with it
// on (opt): the models it loads have it (on), and no other, and so does it (wsOn);
// SetDType keeps it; set(false) clears it on a loaded model and on an open chat's copy
// of it.
func workspaceChoice(t *testing.T, dataDir, dir string, opt Options, on func(*inference.Model) bool, wsOn func(*Workspace) bool, set func(*Workspace, bool)) {
	t.Helper()
	ctx := context.Background()
	opt.DataDir, opt.Backend = dataDir, "cpu"
	w, err := Open(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, _, err := w.SharedModel(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !on(m) || !wsOn(w) {
		t.Errorf("opened with the choice: the model says %v, the workspace %v", on(m), wsOn(w))
	}
	if n := btoi(m.Int8Decode()) + btoi(m.Int8Prefill()) + btoi(m.BF16Prefill()); n != 1 {
		t.Errorf("opened with one rounded-activation choice, the model takes %d", n)
	}
	if err := w.SetDType("bfloat16"); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := w.SharedModel(ctx, dir); !on(m) {
		t.Error("SetDType dropped the choice")
	}
	m, _, _ = w.SharedModel(ctx, dir)
	fork := m.Fork() // as an open chat holds
	set(w, false)
	if on(m) || on(fork) || wsOn(w) {
		t.Errorf("turning the choice off left it on in a loaded model (%v) or an open chat's copy of it (%v)", on(m), on(fork))
	}
}

// --bf16-prefill is --int8-prefill for a bfloat16 checkpoint (loaded as float32, its
// weights kept at 16 bits): the stats line says "(bf16)" where the backend has
// bfloat16 dot products, and the Workspace's choice behaves as the int8 ones do.
func TestBF16PrefillFlag(t *testing.T) {
	b, _ := mx.Open("cpu")
	m, err := inference.Load(inferencetest.Demo(t), b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CastFloats(mx.BFloat16); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "demo-bf16")
	if err := inference.SaveModelFrom(m, inferencetest.Demo(t), dir); err != nil {
		t.Fatal(err)
	}
	prefillFlag(t, dir, "bf16", mx.HasBF16Rows(b), Options{BF16Prefill: true},
		(*inference.Model).BF16Prefill, (*Workspace).BF16Prefill, (*Workspace).SetBF16Prefill)
}

// prefillFlag checks --<tag>-prefill on the model in dir: generate's stats line says
// "prefill … tok/s (<tag>)" exactly when the flag is given and the backend runs it
// (runs); a Workspace opened with the choice (opt) passes workspaceChoice.
func prefillFlag(t *testing.T, dir, tag string, runs bool, opt Options, on func(*inference.Model) bool, wsOn func(*Workspace) bool, set func(*Workspace, bool)) {
	t.Helper()
	ctx := context.Background()
	dataDir := t.TempDir()
	for _, flag := range []bool{true, false} {
		args := []string{"generate", "--prompt", "hello there, how are you", "--max-tokens", "3", "--temp", "0", "--model", dir, "--backend", "cpu", "--data-dir", dataDir}
		if flag {
			args = append(args, "--"+tag+"-prefill")
		}
		var out, errb bytes.Buffer
		if code := Run(ctx, args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("generate --%s-prefill=%v exited %d: %s", tag, flag, code, errb.String())
		}
		said := regexp.MustCompile(`prefill [0-9.]+ tok/s \(` + tag + `\)`).MatchString(errb.String())
		if want := flag && runs; said != want {
			t.Errorf("generate --%s-prefill=%v: the stats line says so %v, want %v:\n%s", tag, flag, said, want, errb.String())
		}
	}
	workspaceChoice(t, dataDir, dir, opt, on, wsOn, set)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
