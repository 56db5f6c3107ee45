package trainer

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/inloop/inloop/mlxbridge/cpu"
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
