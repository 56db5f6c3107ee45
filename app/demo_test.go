package app

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/trainer"
)

// loadDemo extracts the embedded demo model into a fresh data directory and
// loads it on the cpu backend.
func loadDemo(t *testing.T) (string, *inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir, err := demoModelDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, tok := inferencetest.Load(t, dir)
	return dir, m, tok
}

func TestDemoModelExtractsOnce(t *testing.T) {
	data := t.TempDir()
	dir, err := demoModelDir(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(data, "models", "inloop-demo"); dir != want {
		t.Fatalf("demo model at %s, want %s", dir, want)
	}
	var size int64
	for _, f := range demoModelFiles {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	if size > 8<<20 {
		t.Errorf("demo model is %d bytes with its tokenizer, want ≤ 8 MiB", size)
	}
	// A second call finds the stamp and leaves the files alone.
	cfgPath := filepath.Join(dir, "config.json")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(cfgPath, old, old)
	if _, err := demoModelDir(data); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(cfgPath); !st.ModTime().Equal(old) {
		t.Error("the second call rewrote the extracted model")
	}
	// A damaged stamp makes it write the files again.
	os.WriteFile(filepath.Join(dir, ".inloop-demo"), []byte("stale"), 0o644)
	if _, err := demoModelDir(data); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(cfgPath); st.ModTime().Equal(old) {
		t.Error("a stale stamp did not refresh the extracted model")
	}
}

func TestDemoModelWritesEnglish(t *testing.T) {
	_, m, tok := loadDemo(t)
	words, err := demoWords()
	if err != nil {
		t.Fatal(err)
	}
	if n := pretrainParams(m); n < 1e6 || n > 5e6 {
		t.Errorf("demo model has %d parameters, want 1–5M", n)
	}
	for _, prompt := range []string{"The ", "The", "A hacker is"} {
		text, err := greedyText(m, tok, prompt, 48, true)
		if err != nil {
			t.Fatal(err)
		}
		known, total := fractionKnown(text, words)
		t.Logf("%q → %q (%d of %d words in the corpus word list)", prompt, text, known, total)
		if total < 8 || 2*known < total {
			t.Errorf("%q: %d of %d generated words are corpus words, want at least 8 words and half known", prompt, known, total)
		}
	}
}

func pretrainParams(m *inference.Model) int64 {
	var n int64
	for _, p := range m.Params() {
		n += int64(p.Size())
	}
	return n
}

// demoFacts is a small made-up dataset a user might teach the demo model.
var demoFacts = []string{
	"Inloop's mascot is a heron named Ada.",
	"The heron named Ada lives on the roof of the Inloop office.",
	"Ada the heron eats one sardine every morning at nine.",
	"Inloop's mascot is a heron named Ada, and she is grey and blue.",
	"Every release of Inloop is named after a fish that Ada likes.",
	"Inloop's mascot is a heron named Ada who never sleeps.",
	"Ada the heron was hatched in a small pond near the river.",
	"When the build is green, Ada the heron flaps her wings.",
}

// TestDemoLoRALearns teaches the demo model demoFacts with LoRA and checks that
// the loss falls by a large factor and that greedy generation then says what
// it was taught and did not say before. INLOOP_DEMO_LORA_ITERS sets the updates
// (the note's timed run uses 60).
func TestDemoLoRALearns(t *testing.T) {
	dir, m, tok := loadDemo(t)
	const prompt, taught = "Inloop's mascot is", "heron named Ada"
	before, err := greedyText(m, tok, prompt, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(before, taught) {
		t.Fatalf("the untrained demo model already says %q: %q", taught, before)
	}
	var rows strings.Builder
	for _, f := range demoFacts {
		rows.WriteString(`{"text": ` + strconv.Quote(f) + "}\n")
	}
	work := t.TempDir()
	path := filepath.Join(work, "facts.jsonl")
	if err := os.WriteFile(path, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	iters := 30
	if s := os.Getenv("INLOOP_DEMO_LORA_ITERS"); s != "" {
		if iters, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	cfg := trainer.Config{
		Model: dir, Data: path, Backend: "cpu", AdapterPath: filepath.Join(work, "adapter"),
		Iters: iters, BatchSize: 4, LearningRate: 5e-4, NumLayers: -1, Rank: 8,
		MaxSeqLength: 64, StepsPerReport: 1, StepsPerEval: -1, SaveEvery: -1, Seed: 1,
	}
	var losses []float64
	start := time.Now()
	res, err := trainer.Run(t.Context(), cfg, func(ev trainer.Event) {
		if ev.Kind == trainer.EventTrain {
			losses = append(losses, ev.Loss)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if len(losses) < 2 {
		t.Fatalf("%d loss reports", len(losses))
	}
	first := losses[0]
	last := (losses[len(losses)-1] + losses[len(losses)-2]) / 2
	t.Logf("LoRA: %d updates in %s, loss %.3f → %.3f (%.1f×)", res.Steps, took.Round(time.Millisecond), first, last, first/last)
	if last > first/4 {
		t.Errorf("loss fell from %.3f to %.3f, want at least a factor of 4", first, last)
	}

	b, _ := mx.Open("cpu")
	tuned, err := inference.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inference.LoadAdapter(tuned, cfg.AdapterPath); err != nil {
		t.Fatal(err)
	}
	after, err := greedyText(tuned, tok, prompt, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %q%q", prompt, before)
	t.Logf("after:  %q%q", prompt, after)
	if !strings.Contains(after, taught) {
		t.Errorf("after LoRA the model says %q, want %q in it", after, taught)
	}
}

func TestGenerateWithDemoName(t *testing.T) {
	home := t.TempDir()
	t.Setenv("INLOOP_HOME", home)
	t.Chdir(t.TempDir()) // no folder named demo here
	var out, errw strings.Builder
	code := Main([]string{"generate", "--model", "demo", "--backend", "cpu", "--prompt", "The", "--raw", "--temp", "0", "--max-tokens", "12", "--stats=false"}, &out, &errw)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	if len(strings.Fields(out.String())) < 1 {
		t.Errorf("generate --model demo printed %q", out.String())
	}
	if _, err := os.Stat(filepath.Join(home, "models", "inloop-demo", "model.safetensors")); err != nil {
		t.Errorf("the demo model was not extracted into the data directory: %v", err)
	}
}
