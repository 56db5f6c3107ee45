package trainer

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/lora"
)

// heldBytes is the memory the process holds for the Go heap and the cpu backend's
// arrays right now, garbage included: what the kernel sees, not what a forced
// collection would leave.
func heldBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	arrays, pooled, _ := cpu.MemoryDetail()
	return int64(s[0].Value.Uint64()-s[1].Value.Uint64()) + arrays + pooled
}

// A long run over rows of many lengths must hold no more after step 150 than after
// the first steps: every padded length is new to the backend's buffer reuse, and the
// reverse pass builds a fresh graph each step. (Memory once grew by the working set at
// every collection, and a real run was killed by the kernel near step 145.)
func TestMemoryFlatOverLongRun(t *testing.T) {
	if testing.Short() {
		t.Skip("300 training steps")
	}
	dir := t.TempDir()
	model := tinyModelDir(t, dir)
	words := strings.Fields("the cat sat on a mat while two dogs ran in the park and one bird sang of spring rain")
	rng := rand.New(rand.NewPCG(1, 2))
	var rows []string
	for i := 0; i < 64; i++ {
		n := 5 + rng.IntN(80)
		w := make([]string, n)
		for j := range w {
			w[j] = words[rng.IntN(len(words))]
		}
		row, _ := json.Marshal(map[string]string{"text": strings.Join(w, " ")})
		rows = append(rows, string(row))
	}
	data := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(data, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(model, data, filepath.Join(dir, "out"))
	cfg.Iters, cfg.BatchSize, cfg.LearningRate, cfg.SaveEvery, cfg.StepsPerEval = 150, 4, 1e-3, 50, -1
	// The most held over steps 11-30, against the most held over the last 20 steps,
	// measured while the trainer waits for the callback.
	var early, late int64
	_, err := Run(context.Background(), cfg, func(ev Event) {
		if ev.Kind != EventTrain {
			return
		}
		switch {
		case ev.Step > 10 && ev.Step <= 30:
			early = max(early, heldBytes())
		case ev.Step > cfg.Iters-20:
			late = max(late, heldBytes())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held over steps 11-30: %d bytes, over the last 20 steps: %d bytes", early, late)
	if early == 0 || late > early+early/4 {
		t.Errorf("held memory grew from %d bytes early in the run to %d at its end, want within 25%%", early, late)
	}
}

// The memory estimate against what short runs hold. The adapters, their
// gradients and two moments are counted exactly; the whole run's peak (weights,
// activations, garbage not yet collected) must be no more than 1.5× the
// estimate, which a run is admitted on, and the estimate no more than twice the
// peak (three times for a checkpointed run), or runs that fit are refused. One
// shape is dominated by the logits, one by the MLP, one is deep and checkpointed;
// all are big enough that the backend's 64 MiB collection floor is not most of
// what is held.
func TestMemoryEstimateMatchesARun(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		hidden, inter, vocab  int
		batch, seq, rank, lay int
		checkpoint            bool
	}{
		{"logits", 32, 64, 24576, 2, 256, 4, 2, false},
		{"mlp", 32, 4096, 256, 2, 256, 4, 2, false},
		{"deep checkpointed", 64, 1024, 256, 4, 512, 4, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := mx.Open("cpu")
			if err != nil {
				t.Fatal(err)
			}
			// Earlier tests' buffers, kept for reuse, would serve this run
			// without adding to what the process holds.
			runtime.GC()
			runtime.GC()
			mx.ClearCache(b)
			before := heldBytes()
			m := inference.NewRandom(inference.Config{
				ModelType: "llama", HiddenSize: tc.hidden, IntermediateSize: tc.inter, NumHiddenLayers: tc.lay,
				NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-5, RopeTheta: 10000,
				VocabSize: tc.vocab, TieWordEmbeddings: true, MaxPositionEmbeddings: 1024,
			}, 1, b)
			ex := examplesOf(tc.batch, tc.seq+1)
			for i := range ex {
				for j := range ex[i].Tokens {
					ex[i].Tokens[j] = int32((i*7 + j*13) % tc.vocab)
				}
			}
			a, err := newAdapterRun(m, ex, Options{
				LoRA: lora.Config{NumLayers: -1, Rank: tc.rank}, Iters: 1, BatchSize: tc.batch,
				MaxSeqLength: tc.seq, LearningRate: 1e-3, StepsPerReport: 1, GradCheckpoint: tc.checkpoint,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := a.memory.Estimate
			if a.memory.Batch != tc.batch || a.memory.Seq != tc.seq {
				t.Fatalf("estimated for batch %d × %d tokens, want %d × %d", a.memory.Batch, a.memory.Seq, tc.batch, tc.seq)
			}

			// Sampled, for the Go heap's garbage; and the backend's own peak,
			// counted at every allocation, which a sampler starved of a core
			// (CI runs packages side by side) can miss.
			mx.ResetPeakMemory(b)
			activeBefore, _, _ := mx.Memory(b)
			stop, done := make(chan struct{}), make(chan struct{})
			var peak int64
			go func() {
				defer close(done)
				for {
					peak = max(peak, heldBytes())
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Microsecond):
					}
				}
			}()
			err = a.loop(context.Background())
			close(stop)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			held := peak - before
			if _, p, ok := mx.Memory(b); ok {
				held = max(held, p-activeBefore)
			}
			t.Logf("estimate %s (weights %s, activations %s, optimizer %s, headroom %s); the run held %s at its peak",
				fmtBytes(e.Total()), fmtBytes(e.Weights), fmtBytes(e.Activations), fmtBytes(e.Optimizer), fmtBytes(e.Headroom), fmtBytes(held))

			// Adapters and gradients of the same shapes, and the optimizer's state.
			var optimizer int64
			for _, p := range a.params {
				optimizer += 2 * p.Nbytes()
			}
			for _, s := range a.stepper.Optimizer.State().Arrays {
				optimizer += s.Nbytes()
			}
			if e.Optimizer != optimizer {
				t.Errorf("optimizer estimate %d bytes, want %d: adapters, their gradients and the optimizer's state", e.Optimizer, optimizer)
			}
			if e.Weights != m.WeightBytes() {
				t.Errorf("weights estimate %d bytes, the model holds %d", e.Weights, m.WeightBytes())
			}
			if held > e.Total()*3/2 {
				t.Errorf("the run held %s, more than 1.5× its estimate of %s", fmtBytes(held), fmtBytes(e.Total()))
			}
			// A checkpointed run's live arrays are few against the backend's
			// 64 MiB collection floor, so what it holds at its peak depends on
			// when collections land (0.6–1.0 of its estimate here, run to run).
			over := int64(2)
			if tc.checkpoint {
				over = 3
			}
			if e.Total() > over*held {
				t.Errorf("the estimate of %s is more than %d× the %s the run held", fmtBytes(e.Total()), over, fmtBytes(held))
			}
		})
	}
}
