package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/checkpoint"
	"github.com/inloop/inloop/training/optim"
)

// tinyModelDir writes the shared tiny test model (inferencetest) into
// dir/model, a fixed place, because the kill test's child process writes it too.
func tinyModelDir(t testing.TB, dir string) string {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model")
	if err := inference.SaveModel(inference.NewRandom(inferencetest.Config(), 1, b), model); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(model, "tokenizer.json"), inferencetest.TokenizerJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return model
}

const lines = `{"text": "the cat sat on the mat"}
{"text": "a dog ran in the park"}
{"text": "two and two make four"}
{"text": "hello world, hello again"}
`

// dataDir writes an mlx-lm data folder: four lines to memorize, validated and
// tested on the same lines.
func dataDir(t testing.TB, dir string) string {
	t.Helper()
	d := filepath.Join(dir, "data")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train.jsonl", "valid.jsonl", "test.jsonl"} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func baseConfig(model, data, out string) Config {
	return Config{
		Model: model, Data: data, AdapterPath: out, Backend: "cpu",
		Iters: 40, BatchSize: 2, LearningRate: 1e-2, NumLayers: -1, Rank: 4,
		StepsPerReport: 1, StepsPerEval: 20, ValBatches: -1, TestBatches: -1, SaveEvery: 10, Seed: 3,
	}
}

// collect runs Run and gathers its events.
func collect(ctx context.Context, cfg Config) (Result, []Event, error) {
	var evs []Event
	res, err := Run(ctx, cfg, func(ev Event) { evs = append(evs, ev) })
	return res, evs, err
}

func TestTrainLossDecreases(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	cfg := baseConfig(model, data, filepath.Join(dir, "run"))
	cfg.Dropout = 0.05
	cfg.GradAccumulation = 2
	cfg.ClipGradNorm = 1
	cfg.Warmup, cfg.Cosine = 5, true
	res, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var train []Event
	var val, test, ckpt int
	for _, ev := range evs {
		switch ev.Kind {
		case EventTrain:
			train = append(train, ev)
		case EventVal:
			val++
		case EventTest:
			test++
		case EventCheckpoint:
			ckpt++
		case EventWarning:
			t.Logf("warning: %s", ev.Message)
		}
	}
	if len(train) != 40 || val != 2 || test != 1 || ckpt != 4 {
		t.Fatalf("%d train, %d val, %d test, %d checkpoint events", len(train), val, test, ckpt)
	}
	first, last := train[0].Loss, train[len(train)-1].Loss
	t.Logf("loss %.3f → %.3f, val %.3f, test %.3f (ppl %.2f), %v", first, last, res.ValLoss, res.TestLoss, res.TestPerplexity, res.Duration)
	if !(last < first/2) || !(res.ValLoss < first/2) {
		t.Errorf("loss did not fall: first %.3f, last %.3f, val %.3f", first, last, res.ValLoss)
	}
	if math.Abs(res.TestPerplexity-math.Exp(res.TestLoss)) > 1e-9 {
		t.Error("perplexity is not exp(test loss)")
	}
	if train[0].LR != 0 || train[5].LR < train[20].LR || train[20].TokensPerSec <= 0 {
		t.Errorf("warmup/cosine learning rates or speed look wrong: %+v, %+v", train[0], train[20])
	}
	// The adapter loads with inference.LoadAdapter and gives the trained model.
	b, _ := mx.Open("cpu")
	m, err := inference.Load(model, b)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := inference.LoadAdapter(m, cfg.AdapterPath)
	if err != nil {
		t.Fatal(err)
	}
	if ac.NumLayers != 2 || ac.LoRAParameters.Rank != 4 || ac.LoRAParameters.Scale != 20 {
		t.Errorf("adapter config %+v", ac)
	}
}

func TestDocumentsFolder(t *testing.T) {
	dir := t.TempDir()
	model := tinyModelDir(t, dir)
	docs := filepath.Join(dir, "docs")
	os.MkdirAll(docs, 0o755)
	os.WriteFile(filepath.Join(docs, "a.md"), []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10)), 0o644)
	cfg := baseConfig(model, docs, filepath.Join(dir, "run"))
	cfg.Epochs, cfg.ChunkSize, cfg.SaveEvery = 1, 32, -1
	// An opened backend is used as given; the name is only for opening one.
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	cfg.BackendImpl, cfg.Backend = b, "no such backend"
	res, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for _, ev := range evs {
		if ev.Kind == EventInfo && strings.HasPrefix(ev.Message, "documents:") {
			fmt.Sscanf(ev.Message, "documents: 1 files, %d chunks", &chunks)
		}
	}
	if chunks < 3 || res.Steps != (chunks+1)/2 || !math.IsNaN(res.ValLoss) {
		t.Logf("%d chunks", chunks)
		t.Errorf("%+v", res)
	}
	if _, step, err := checkpoint.Latest(cfg.AdapterPath); err != nil || step != res.Steps {
		t.Errorf("final checkpoint: step %d, %v", step, err)
	}
}

func TestNonFiniteStops(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	cfg := baseConfig(model, data, filepath.Join(dir, "run"))
	cfg.SaveEvery = 2
	// A sane rate for four updates, then one that blows the weights up.
	cfg.Schedule = optim.ScheduleFunc(func(step int) float32 {
		if step < 4 {
			return 1e-3
		}
		return 1e30
	})
	res, _, err := collect(context.Background(), cfg)
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err = %v, want ErrNonFinite", err)
	}
	t.Logf("%v", err)
	if !strings.Contains(err.Error(), "step-000004") {
		t.Errorf("the error does not name the last good checkpoint: %v", err)
	}
	path, step, lerr := checkpoint.Latest(cfg.AdapterPath)
	if lerr != nil || step != 4 || res.LastCheckpoint != path {
		t.Fatalf("latest checkpoint %s step %d (%v); result says %s", path, step, lerr, res.LastCheckpoint)
	}
	ck, lerr := checkpoint.Load(path)
	if lerr != nil {
		t.Fatal(lerr)
	}
	var xs []*mx.Array
	for _, a := range ck.Adapters {
		xs = append(xs, a)
	}
	if ok, _ := optim.AllFinite(xs...); !ok {
		t.Error("the kept checkpoint is not finite")
	}
}

// Cancelling keeps the checkpoints; this also runs the channel form, Train.
func TestCancelKeepsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	cfg := baseConfig(model, data, filepath.Join(dir, "run"))
	cfg.Iters, cfg.SaveEvery = 1000, 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, cfg, func(ev Event) {
		if ev.Kind == EventCheckpoint {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "step-000003") {
		t.Fatalf("err = %v", err)
	}
}

// The kill test: a child process trains with a checkpoint every few steps and
// is killed with SIGKILL at a random step after its first checkpoint; a resume
// must then end bit for bit where an uninterrupted run with the same seed ends.
// Three micro-batches of two rows over four examples make a step one and a half
// epochs, so checkpoints fall both inside an epoch and at its end.

const (
	helperEnv   = "INLOOP_TRAIN_HELPER_DIR"
	killStepEnv = "INLOOP_KILL_STEP" // kill at this step instead of a random one
)

func killConfig(dir string) Config {
	cfg := baseConfig(filepath.Join(dir, "model"), filepath.Join(dir, "data"), filepath.Join(dir, "killed"))
	cfg.Iters, cfg.SaveEvery, cfg.StepsPerEval = 24, 3, -1
	cfg.Dropout, cfg.GradAccumulation = 0.1, 3
	cfg.Warmup, cfg.Cosine = 3, true
	return cfg
}

func TestHelperTrain(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("run by TestKillResume")
	}
	_, err := Run(context.Background(), killConfig(dir), func(ev Event) {
		if ev.Kind == EventTrain {
			fmt.Printf("step %d\n", ev.Step)
		}
		time.Sleep(15 * time.Millisecond) // slow enough to be killed mid-run
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	tinyModelDir(t, dir)
	dataDir(t, dir)
	cfg := killConfig(dir)
	// After the first checkpoint and before the last step; the child reports a
	// step before saving its checkpoint, so it dies between two.
	killAt := cfg.SaveEvery + 1 + rand.IntN(cfg.Iters-cfg.SaveEvery-2)
	if v := os.Getenv(killStepEnv); v != "" {
		var err error
		if killAt, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s: %v", killStepEnv, err)
		}
	}
	t.Logf("killing at step %d (%s=%d repeats this)", killAt, killStepEnv, killAt)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTrain$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	var out strings.Builder
	reached := false
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		out.WriteString(sc.Text() + "\n")
		var step int
		if _, err := fmt.Sscanf(sc.Text(), "step %d", &step); err == nil && step >= killAt {
			cmd.Process.Kill() // SIGKILL
			reached = true
			break
		}
	}
	werr := cmd.Wait()
	if !reached {
		t.Fatalf("the child never reached step %d: %v\n%s%s", killAt, werr, out.String(), errOut.String())
	}
	if werr == nil {
		t.Fatalf("the child finished before it was killed:\n%s", out.String())
	}
	_, step, err := checkpoint.Latest(cfg.AdapterPath)
	if err != nil || step < cfg.SaveEvery || step >= killAt {
		t.Fatalf("after a kill at step %d: checkpoint step %d, %v; want one before it", killAt, step, err)
	}
	t.Logf("killed at step %d with checkpoint step %d on disk", killAt, step)

	resumed := cfg
	resumed.Resume = true
	res, err := Run(context.Background(), resumed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != step || res.Steps != cfg.Iters {
		t.Fatalf("resumed from %d to %d", res.ResumedFrom, res.Steps)
	}
	straight := cfg
	straight.AdapterPath = filepath.Join(dir, "straight")
	if _, err := Run(context.Background(), straight, nil); err != nil {
		t.Fatal(err)
	}
	a, _, err := mx.LoadSafetensors(mx.Default(), filepath.Join(resumed.AdapterPath, "adapters.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := mx.LoadSafetensors(mx.Default(), filepath.Join(straight.AdapterPath, "adapters.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d vs %d adapter arrays", len(a), len(b))
	}
	// Exact: the cpu backend runs the same ops in the same order, so any
	// difference, however small, is state the resume did not restore.
	var differ, total int
	var worst float64
	for name, x := range a {
		xv, _ := x.Float32s()
		yv, err := b[name].Float32s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range xv {
			total++
			if math.Float32bits(xv[i]) != math.Float32bits(yv[i]) {
				differ++
				worst = max(worst, math.Abs(float64(xv[i]-yv[i])))
			}
		}
	}
	if differ > 0 {
		t.Errorf("resumed run differs from the uninterrupted one in %d of %d weights (by up to %g), want bit for bit", differ, total, worst)
	}
}

// QLoRA: the same training over a 4-bit copy of the model; the base stays
// quantized and only the adapters move.
func TestQLoRA(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	q := filepath.Join(dir, "q4")
	if _, err := inference.QuantizeModel(model, q, 4, 32); err != nil {
		t.Fatal(err)
	}
	tok, _ := os.ReadFile(filepath.Join(model, "tokenizer.json"))
	os.WriteFile(filepath.Join(q, "tokenizer.json"), tok, 0o644)
	cfg := baseConfig(q, data, filepath.Join(dir, "run"))
	cfg.Iters, cfg.SaveEvery, cfg.StepsPerEval = 20, -1, -1
	res, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var first, last float64
	for _, ev := range evs {
		if ev.Kind == EventTrain {
			if ev.Step == 1 {
				first = ev.Loss
			}
			last = ev.Loss
		}
		if ev.Kind == EventInfo && strings.Contains(ev.Message, "LoRA") && !strings.Contains(ev.Message, "QLoRA") {
			t.Errorf("not reported as QLoRA: %s", ev.Message)
		}
	}
	t.Logf("QLoRA loss %.3f → %.3f in %v", first, last, res.Duration)
	if !(last < first/2) {
		t.Errorf("QLoRA loss did not fall: %.3f → %.3f", first, last)
	}
}
