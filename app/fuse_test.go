package app

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/internal/atomicfile"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// bf16ModelDir is the tiny test model converted to bfloat16, as a Hugging Face
// checkpoint usually is.
func bf16ModelDir(t *testing.T) string {
	t.Helper()
	src := tinyModelDir(t)
	b, _ := mx.Open("cpu")
	m, err := inference.LoadWithOptions(src, b, inference.LoadOptions{DType: mx.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bf16")
	if err := inference.SaveModelFrom(m, src, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randomAdapter writes an mlx-lm adapter with non-zero A and B on two layers.
func randomAdapter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	arrays := map[string]*mx.Array{}
	for _, p := range []string{"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"} {
		in := 64
		if strings.HasSuffix(p, "down_proj") {
			in = 128
		}
		arrays[p+".lora_a"] = mx.MulScalar(mx.RandomNormal(uint64(len(p)), in, 4), 0.1)
		arrays[p+".lora_b"] = mx.MulScalar(mx.RandomNormal(uint64(len(p)+1), 4, 64), 0.05)
	}
	if err := mx.SaveSafetensors(filepath.Join(dir, "adapters.safetensors"), arrays, nil); err != nil {
		t.Fatal(err)
	}
	cfg := `{"fine_tune_type":"lora","num_layers":2,"lora_parameters":{"rank":4,"scale":2.0,"dropout":0.0,"keys":["self_attn.q_proj","mlp.down_proj"]}}`
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tensorDTypes maps every tensor of a model folder to its stored dtype.
func tensorDTypes(t *testing.T, dir string) map[string]safetensors.DType {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	out := map[string]safetensors.DType{}
	for _, n := range set.Names() {
		info, _ := set.Info(n)
		out[n] = info.DType
	}
	return out
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func folderBytes(t *testing.T, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
		if fi, err := d.Info(); err == nil && strings.HasSuffix(d.Name(), ".safetensors") {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// inloop fuse writes the base's dtypes (a bfloat16 model stays bfloat16, a
// quantized one keeps its half-precision scales), keeps config.json as it was,
// converts only when --dtype says so, and writes every file with the same,
// normal permissions.
func TestFuseKeepsDTypes(t *testing.T) {
	base, adapter := bf16ModelDir(t), randomAdapter(t)
	dataDir := t.TempDir()
	fuse := func(model, out string, extra ...string) {
		t.Helper()
		var o, e bytes.Buffer
		args := append([]string{"fuse", "--model", model, "--adapter-path", adapter, "--save-path", out, "--backend", "cpu", "--data-dir", dataDir}, extra...)
		if code := Main(args, &o, &e); code != 0 {
			t.Fatalf("fuse %v exited %d: %s", extra, code, e.String())
		}
	}
	greedy := func(extra ...string) string {
		t.Helper()
		var o, e bytes.Buffer
		args := append([]string{"generate", "--backend", "cpu", "--data-dir", dataDir, "--prompt", "the cat", "--max-tokens", "8", "--temp", "0", "--raw", "--stats=false", "--dtype", "auto"}, extra...)
		if code := Main(args, &o, &e); code != 0 {
			t.Fatalf("generate %v exited %d: %s", extra, code, e.String())
		}
		return o.String()
	}

	out := filepath.Join(t.TempDir(), "fused")
	fuse(base, out)
	for name, dt := range tensorDTypes(t, out) {
		if dt != safetensors.DTypeBF16 {
			t.Errorf("fused %s is %s, want BF16 like the base", name, dt)
		}
	}
	if got, want := readJSON(t, filepath.Join(out, "config.json")), readJSON(t, filepath.Join(base, "config.json")); !reflect.DeepEqual(got, want) {
		t.Errorf("fused config.json\n%v\ndiffers from the base's\n%v", got, want)
	}
	if a, b := folderBytes(t, out), folderBytes(t, base); a > b+b/50 {
		t.Errorf("fused weights take %d bytes, the bf16 base %d", a, b)
	}
	if a, f := greedy("--model", base, "--adapter", adapter), greedy("--model", out); a != f {
		t.Errorf("fused model generates %q, the base with the adapter %q", f, a)
	}
	assertPermissions(t, out)

	// --dtype float32 converts and says so.
	out32 := filepath.Join(t.TempDir(), "fused32")
	fuse(base, out32, "--dtype", "float32")
	for name, dt := range tensorDTypes(t, out32) {
		if dt != safetensors.DTypeF32 {
			t.Errorf("--dtype float32: %s is %s", name, dt)
		}
	}
	if dt := readJSON(t, filepath.Join(out32, "config.json"))["torch_dtype"]; dt != "float32" {
		t.Errorf("--dtype float32: config.json says torch_dtype %v", dt)
	}

	// A 4-bit base: packed words stay packed, scales and biases stay bfloat16,
	// the quantization block is the base's.
	q4 := filepath.Join(t.TempDir(), "q4")
	if _, err := inference.QuantizeModel(base, q4, 4, 32); err != nil {
		t.Fatal(err)
	}
	outQ := filepath.Join(t.TempDir(), "fusedq")
	fuse(q4, outQ)
	for name, dt := range tensorDTypes(t, outQ) {
		want := safetensors.DTypeBF16
		if strings.HasSuffix(name, "proj.weight") || name == "model.embed_tokens.weight" {
			want = safetensors.DTypeU32
		}
		if dt != want {
			t.Errorf("fused 4-bit %s is %s, want %s", name, dt, want)
		}
	}
	if got, want := readJSON(t, filepath.Join(outQ, "config.json")), readJSON(t, filepath.Join(q4, "config.json")); !reflect.DeepEqual(got, want) {
		t.Errorf("fused 4-bit config.json\n%v\ndiffers from the base's\n%v", got, want)
	}

	// --dequantize: dense bfloat16, no quantization block, as mlx-lm's.
	outD := filepath.Join(t.TempDir(), "fusedd")
	fuse(q4, outD, "--dequantize")
	for name, dt := range tensorDTypes(t, outD) {
		if dt != safetensors.DTypeBF16 {
			t.Errorf("--dequantize: %s is %s, want BF16", name, dt)
		}
	}
	cfg := readJSON(t, filepath.Join(outD, "config.json"))
	if _, ok := cfg["quantization"]; ok {
		t.Error("--dequantize kept the quantization block")
	}
	if _, ok := cfg["quantization_config"]; ok {
		t.Error("--dequantize kept quantization_config")
	}
	if a, f := greedy("--model", q4, "--adapter", adapter), greedy("--model", outD); a != f {
		t.Errorf("dequantized fused model generates %q, the 4-bit base with the adapter %q", f, a)
	}

	var o, e bytes.Buffer
	if code := Main([]string{"fuse", "--model", base, "--adapter-path", adapter, "--save-path", out, "--backend", "cpu", "--data-dir", dataDir}, &o, &e); code == 0 {
		t.Error("fuse over a non-empty folder succeeded")
	}
	if code := Main([]string{"fuse", "--model", base, "--adapter-path", adapter, "--save-path", filepath.Join(t.TempDir(), "x"), "--dtype", "int4", "--data-dir", dataDir}, &o, &e); code == 0 {
		t.Error("fuse --dtype int4 succeeded")
	}
	// --kernel cpu re-quantizes with MLX's CPU rounding; the folder loads all the same.
	outK := filepath.Join(t.TempDir(), "fusedk")
	fuse(q4, outK, "--kernel", "cpu")
	if a, f := greedy("--model", q4, "--adapter", adapter), greedy("--model", outK); a != f {
		t.Errorf("fused with --kernel cpu generates %q, the 4-bit base with the adapter %q", f, a)
	}
	if code := Main([]string{"fuse", "--model", q4, "--adapter-path", adapter, "--save-path", filepath.Join(t.TempDir(), "y"), "--kernel", "metal", "--data-dir", dataDir}, &o, &e); code == 0 {
		t.Error("fuse --kernel metal succeeded")
	}
}

// assertPermissions checks dir and every entry in it against atomicfile's
// normal permissions.
func assertPermissions(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		want := atomicfile.Perm
		if d.IsDir() {
			want = atomicfile.DirPerm
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
		return nil
	})
}

// A trained adapter folder, checkpoints included, has the permissions of every
// other folder Inloop writes (checkpoint folders were assembled with 0700).
func TestAdapterFolderPermissions(t *testing.T) {
	adapter := filepath.Join(t.TempDir(), "adapter")
	var o, e bytes.Buffer
	args := []string{"train", "--model", tinyModelDir(t), "--data", tinyData(t), "--iters", "2", "--batch-size", "1", "--steps-per-eval", "-1",
		"--save-every", "1", "--adapter-path", adapter, "--backend", "cpu", "--data-dir", t.TempDir()}
	if code := Main(args, &o, &e); code != 0 {
		t.Fatalf("train exited %d: %s", code, e.String())
	}
	for _, f := range []string{"adapters.safetensors", "adapter_config.json", "checkpoints"} {
		if _, err := os.Stat(filepath.Join(adapter, f)); err != nil {
			t.Error(err)
		}
	}
	assertPermissions(t, adapter)
}
