package checkpoint

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/mlxbridge/safetensors"
	"github.com/inloop/inloop/training/optim"
)

// sample is a checkpoint whose every field depends on step, so a test can tell
// which step it got back and whether anything was mixed up.
func sample(step int) *Checkpoint {
	fill := func(n int, off float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(step) + off + float32(i)/1024
		}
		return v
	}
	b := mx.Default()
	return &Checkpoint{
		Step: step,
		Adapters: map[string]*mx.Array{
			"model.layers.0.self_attn.q_proj.lora_a": mx.FromFloat32(fill(64*8, 0), 64, 8),
			"model.layers.0.self_attn.q_proj.lora_b": mx.FromData(b, mx.BFloat16, fill(8*64, 0.5), 8, 64),
		},
		Optimizer: OptimizerState{
			Arrays: map[string]*mx.Array{
				"model.layers.0.self_attn.q_proj.lora_a.m": mx.FromFloat32(fill(64*8, 1e-3), 64, 8),
				"model.layers.0.self_attn.q_proj.lora_a.v": mx.FromFloat32(fill(64*8, 2e-3), 64, 8),
			},
			Scalars: map[string]float64{"step": float64(step)},
		},
		Data:    DataPosition{Epoch: step / 10, Batch: step % 10, ShuffleSeed: 1<<63 + uint64(step), RNGState: []byte{0, 1, 2, byte(step), 0xff}},
		Seed:    0xfedcba9876543210,
		Config:  []byte("{\n  \"iters\": 1000,\n  \"learning_rate\": 1e-5\n}\n"),
		Metrics: map[string]float64{"train_loss": 1 / float64(step+1), "val_loss": math.Inf(1), "tokens": 3e9 + float64(step), "nan": math.NaN()},
	}
}

func tensorBytes(t *testing.T, name string, a *mx.Array) safetensors.Tensor {
	t.Helper()
	tt, err := mx.ToTensor(name, a)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func sameArrays(t *testing.T, what string, got, want map[string]*mx.Array) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d arrays, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("%s: %q missing", what, name)
		}
		gt, wt := tensorBytes(t, name, g), tensorBytes(t, name, w)
		if gt.DType != wt.DType || !slices.Equal(gt.Shape, wt.Shape) || !bytes.Equal(gt.Data, wt.Data) {
			t.Errorf("%s %q: got %s %v, want %s %v (or different bytes)", what, name, gt.DType, gt.Shape, wt.DType, wt.Shape)
		}
	}
}

func sameFloats(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Float64bits(g) != math.Float64bits(w) {
			t.Errorf("%s[%q] = %v, want %v", what, k, g, w)
		}
	}
}

func sameCheckpoint(t *testing.T, got, want *Checkpoint) {
	t.Helper()
	if got.Step != want.Step || got.Seed != want.Seed {
		t.Errorf("step %d seed %d, want %d %d", got.Step, got.Seed, want.Step, want.Seed)
	}
	if got.Data.Epoch != want.Data.Epoch || got.Data.Batch != want.Data.Batch || got.Data.ShuffleSeed != want.Data.ShuffleSeed || !bytes.Equal(got.Data.RNGState, want.Data.RNGState) {
		t.Errorf("data position %+v, want %+v", got.Data, want.Data)
	}
	if !bytes.Equal(got.Config, want.Config) {
		t.Errorf("config %q, want %q", got.Config, want.Config)
	}
	sameArrays(t, "adapters", got.Adapters, want.Adapters)
	sameArrays(t, "optimizer", got.Optimizer.Arrays, want.Optimizer.Arrays)
	sameFloats(t, "optimizer scalars", got.Optimizer.Scalars, want.Optimizer.Scalars)
	sameFloats(t, "metrics", got.Metrics, want.Metrics)
}

func mustSave(t *testing.T, runDir string, c *Checkpoint) {
	t.Helper()
	if err := Save(runDir, c); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	run := t.TempDir()
	want := sample(100)
	mustSave(t, run, want)
	dir := Dir(run, 100)
	if filepath.Base(dir) != "step-000100" {
		t.Fatalf("Dir = %s", dir)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, want)

	// Nothing but the three files, and no temporary folder left behind.
	des, _ := os.ReadDir(dir)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if !slices.Equal(names, []string{AdaptersFile, OptimizerFile, StateFile}) {
		t.Errorf("checkpoint holds %v", names)
	}
	if des, _ := os.ReadDir(filepath.Join(run, Subdir)); len(des) != 1 {
		t.Errorf("checkpoints folder holds %d entries, want 1", len(des))
	}
	// adapters.safetensors is a plain safetensors file in mlx's layout, readable
	// without this package (mlx-lm loads it as is).
	f, err := safetensors.Open(filepath.Join(dir, AdaptersFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata()["format"] != "mlx" || f.Len() != 2 {
		t.Errorf("adapters.safetensors: %d tensors, metadata %v", f.Len(), f.Metadata())
	}
}

// An optimizer without array state (plain SGD) and a checkpoint without metrics
// or configuration still round-trip.
func TestRoundTripMinimal(t *testing.T) {
	run := t.TempDir()
	want := &Checkpoint{Adapters: map[string]*mx.Array{"w": mx.FromFloat32([]float32{1}, 1)}}
	mustSave(t, run, want)
	got, err := Load(Dir(run, 0))
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, want)
	for _, bad := range []*Checkpoint{nil, {Step: -1, Adapters: want.Adapters}, {Step: 1}, {Adapters: want.Adapters, Data: DataPosition{Batch: -1}}} {
		if err := Save(run, bad); err == nil {
			t.Errorf("Save(%+v) succeeded", bad)
		}
	}
}

// The optimizer's exported state converts to the checkpoint's and back, and an
// optimizer resumed from a loaded checkpoint continues exactly as the original.
func TestOptimizerResume(t *testing.T) {
	o := optim.NewAdamW(optim.WarmupCosine(1e-2, 2, 10, 0))
	params := map[string]*mx.Array{"lora_a": mx.FromFloat32([]float32{1, 2, 3}, 3)}
	grads := map[string]*mx.Array{"lora_a": mx.FromFloat32([]float32{0.5, -1, 2}, 3)}
	for range 3 {
		var err error
		if params, err = o.Step(params, grads); err != nil {
			t.Fatal(err)
		}
	}
	run := t.TempDir()
	mustSave(t, run, &Checkpoint{Step: o.Steps(), Adapters: params, Optimizer: OptimizerState(o.State())})
	path, step, err := Latest(run)
	if err != nil || step != 3 {
		t.Fatalf("Latest = %s, %d, %v", path, step, err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	resumed := optim.NewAdamW(optim.WarmupCosine(1e-2, 2, 10, 0))
	if err := resumed.SetState(optim.State(c.Optimizer)); err != nil {
		t.Fatal(err)
	}
	want, _ := o.Step(params, grads)
	got, err := resumed.Step(c.Adapters, grads)
	if err != nil {
		t.Fatal(err)
	}
	sameArrays(t, "after resuming", got, want)
}

// Saving a step that already has a checkpoint (a run resumed from an earlier one)
// replaces it.
func TestSaveReplaces(t *testing.T) {
	run := t.TempDir()
	old := sample(200)
	old.Seed = 1
	mustSave(t, run, old)
	mustSave(t, run, sample(200))
	got, err := Load(Dir(run, 200))
	if err != nil {
		t.Fatal(err)
	}
	if got.Seed != sample(200).Seed {
		t.Error("the old checkpoint is still there")
	}
	if des, _ := os.ReadDir(filepath.Join(run, Subdir)); len(des) != 1 {
		t.Errorf("checkpoints folder holds %d entries, want 1", len(des))
	}
}

func TestLatestEmpty(t *testing.T) {
	run := t.TempDir()
	if _, _, err := Latest(run); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("no checkpoints folder: got %v, want ErrNoCheckpoint", err)
	}
	os.MkdirAll(filepath.Join(run, Subdir, "notes"), 0o755)
	if _, _, err := Latest(run); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("nothing usable: got %v, want ErrNoCheckpoint", err)
	}
}

func TestDirNames(t *testing.T) {
	for name, want := range map[string]int{"step-000000": 0, "step-000100": 100, "step-1234567": 1234567} {
		if got, ok := parseDirName(name); !ok || got != want {
			t.Errorf("parseDirName(%q) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"step-100", "step-0000100", "step-", "step--00001", "step-+00001", ".tmp-step-000100-123", "step-000100.old", "Step-000100"} {
		if _, ok := parseDirName(name); ok {
			t.Errorf("parseDirName(%q) accepted", name)
		}
	}
}

func TestStateFileIsReadable(t *testing.T) {
	run := t.TempDir()
	mustSave(t, run, sample(7))
	data, err := os.ReadFile(filepath.Join(Dir(run, 7), StateFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"format": "inloop.checkpoint"`, `"version": 1`, `"step": 7`, `"val_loss": "+Inf"`, `"nan": "NaN"`, `"seed": 18364758544493064720`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("state.json lacks %s:\n%s", want, data)
		}
	}
}
