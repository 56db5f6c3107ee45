package trainer

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// runSeeing is Run with the model handed to onEvent beside each event, so a
// test can look at what the run's adapters hold after a step.
func runSeeing(ctx context.Context, cfg Config, onEvent func(Event, *inference.Model)) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	r := &run{cfg: cfg, ctx: ctx, lastSaved: -1}
	r.onEvent = func(ev Event) { onEvent(ev, r.m) }
	return r.run()
}

// dropoutMasks is what the dropout of m's top adapter multiplies a (1, 3, In)
// input of ones by, layer after layer: the masks of the last micro-batch.
func dropoutMasks(t *testing.T, m *inference.Model) []float32 {
	t.Helper()
	top := m.TopAdapter()
	var all []float32
	for _, path := range top.Paths() {
		lo, _ := top.LoRA(path)
		if lo.Drop == nil {
			t.Fatalf("%s: no dropout while training", path)
		}
		in := lo.A.Shape()[0]
		ones := make([]float32, 3*in)
		for i := range ones {
			ones[i] = 1
		}
		v, err := lo.Drop(mx.FromData(m.Backend(), mx.Float32, ones, 1, 3, in)).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, v...)
	}
	return all
}

// Dropout draws new masks at every step (a seed that ignored the step number
// would train every step through the same units), and a resumed run draws
// the masks the uninterrupted one drew at the same steps.
func TestDropoutMasksPerStepAndAfterResume(t *testing.T) {
	dir := t.TempDir()
	model, data := tinyModelDir(t, dir), dataDir(t, dir)
	cfg := baseConfig(model, data, filepath.Join(dir, "straight"))
	cfg.Iters, cfg.SaveEvery, cfg.StepsPerEval = 6, 3, -1
	cfg.Dropout, cfg.GradAccumulation = 0.3, 2

	record := func(cfg Config, stopAt int) (map[int][]float32, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		masks := map[int][]float32{}
		err := runSeeing(ctx, cfg, func(ev Event, m *inference.Model) {
			switch {
			case ev.Kind == EventTrain:
				masks[ev.Step] = dropoutMasks(t, m)
			case ev.Kind == EventCheckpoint && ev.Step == stopAt:
				cancel()
			}
		})
		return masks, err
	}
	straight, err := record(cfg, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(straight) != cfg.Iters {
		t.Fatalf("masks of %d steps, want %d", len(straight), cfg.Iters)
	}
	for s := 1; s <= cfg.Iters; s++ {
		var dropped int
		for _, v := range straight[s] {
			if v == 0 {
				dropped++
			}
		}
		if f := float64(dropped) / float64(len(straight[s])); f < 0.2 || f > 0.4 {
			t.Errorf("step %d drops %.2f of the inputs, want about 0.3", s, f)
		}
		for r := 1; r < s; r++ {
			if slices.Equal(straight[r], straight[s]) {
				t.Errorf("steps %d and %d drew the same dropout masks", r, s)
			}
		}
	}

	cfg.AdapterPath = filepath.Join(dir, "resumed")
	if _, err := record(cfg, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v, want context.Canceled", err)
	}
	cfg.Resume = true
	resumed, err := record(cfg, -1)
	if err != nil {
		t.Fatal(err)
	}
	for s := 4; s <= cfg.Iters; s++ {
		if !slices.Equal(resumed[s], straight[s]) {
			t.Errorf("step %d after resuming from step 3 drew other masks than the uninterrupted run", s)
		}
	}
	if _, ok := resumed[3]; ok || len(resumed) != 3 {
		t.Errorf("the resumed run took steps %v, want 4 to 6", slices.Sorted(maps.Keys(resumed)))
	}
}
