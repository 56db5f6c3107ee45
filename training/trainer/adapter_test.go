package trainer

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
)

// memExamples are token sequences to memorize, learned after their first two
// tokens (a prompt).
func memExamples() []data.Example {
	var ex []data.Example
	for i, toks := range [][]int32{
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
		{11, 12, 13, 14, 15, 16, 17},
		{20, 22, 24, 26, 28, 30, 32, 34},
		{39, 38, 37, 36, 35, 34},
	} {
		mask := make([]bool, len(toks))
		for j := 2; j < len(mask); j++ {
			mask[j] = true
		}
		ex = append(ex, data.Example{Tokens: toks, Mask: mask, Source: "mem:" + string(rune('a'+i))})
	}
	return ex
}

// TrainAdapter trains on a model and examples in memory, writes nothing, and
// returns the adapter the model now holds.
func TestTrainAdapterInMemory(t *testing.T) {
	t.Chdir(t.TempDir()) // a relative path written anywhere would land here
	m := tinyModel(t)
	ex := memExamples()
	opts := Options{
		LoRA:  lora.Config{NumLayers: -1, Rank: 4, Seed: 5, Dropout: 0.05},
		Iters: 30, BatchSize: 2, GradAccumulation: 2, LearningRate: 1e-2, ClipGradNorm: 5,
		StepsPerReport: 1, Valid: ex, StepsPerEval: 10, ValBatches: -1, Seed: 9,
	}
	var train, val, done int
	var first, last float64
	params, res, err := TrainAdapter(context.Background(), m, ex, opts, func(ev Event) {
		switch ev.Kind {
		case EventTrain:
			if train == 0 {
				first = ev.Loss
			}
			last = ev.Loss
			train++
			if ev.Iters != 30 || ev.Elapsed <= 0 {
				t.Errorf("train event %+v: want Iters 30 and the time elapsed", ev)
			}
		case EventVal:
			val++
		case EventDone:
			done++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %.3f → %.3f, val %.3f, %d tokens in %v", first, last, res.ValLoss, res.Tokens, res.Duration)
	if train != 30 || val != 3 || done != 1 || res.Steps != 30 {
		t.Fatalf("%d train, %d val, %d done events, %d steps", train, val, done, res.Steps)
	}
	if !(last < first/2) || !(res.ValLoss < first/2) || res.TrainLoss != last {
		t.Errorf("loss did not fall: %.3f → %.3f, val %.3f", first, last, res.ValLoss)
	}
	if d := maxDiff(t, lora.Params(m), params); d != 0 || len(params) != 2*7*2 {
		t.Errorf("%d adapter arrays, %g away from what the model holds", len(params), d)
	}
	if names, _ := os.ReadDir("."); len(names) != 0 {
		t.Errorf("TrainAdapter wrote %d files into the working directory", len(names))
	}

	// Starting from the trained adapter continues where it ended.
	opts.Init, opts.Iters, opts.Valid = params, 1, nil
	var again float64
	_, _, err = TrainAdapter(context.Background(), tinyModel(t), ex, opts, func(ev Event) {
		if ev.Kind == EventTrain {
			again = ev.Loss
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !(again < first/2) {
		t.Errorf("continuing from the trained adapter starts at loss %.3f, fresh adapters at %.3f", again, first)
	}
}

func TestTrainAdapterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := tinyModel(t)
	opts := Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 100, BatchSize: 2, LearningRate: 1e-3, StepsPerReport: 1}
	params, res, err := TrainAdapter(ctx, m, memExamples(), opts, func(ev Event) {
		if ev.Kind == EventTrain && ev.Step == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || res.Steps != 3 {
		t.Fatalf("err = %v after %d steps, want context.Canceled after 3", err, res.Steps)
	}
	if d := maxDiff(t, lora.Params(m), params); d != 0 || len(params) == 0 {
		t.Errorf("a cancelled run returned %d arrays, %g away from the model's", len(params), d)
	}
}

// Library errors give the numbers, not a command line's flags.
func TestOptionErrors(t *testing.T) {
	m := tinyModel(t)
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"negative batch", Options{BatchSize: -1}},
		{"warmup", Options{Iters: 5, Warmup: 5}},
		{"optimizer", Options{Optimizer: "lion"}},
	} {
		_, res, err := TrainAdapter(context.Background(), m, memExamples(), c.opts, nil)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !math.IsNaN(res.TrainLoss) {
			t.Errorf("%s: train loss %v, want NaN", c.name, res.TrainLoss)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%s: %v: names a flag", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
	}
	if _, err := Run(context.Background(), Config{Model: "m", Data: "d"}, nil); err == nil {
		t.Error("Run without an adapter path was accepted")
	}
}
