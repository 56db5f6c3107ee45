package pretrain

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/trainer"
)

func tinyConfig() Config {
	return Config{
		Model: inference.Config{
			ModelType: "llama", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-5, RopeTheta: 10000,
			TieWordEmbeddings: true, VocabSize: 16, MaxPositionEmbeddings: 64, HiddenAct: "silu",
		},
		Steps: 60, BatchSize: 4, SeqLen: 16, LR: 1e-2, MinLR: 1e-3, Warmup: 5, ClipNorm: 1, Seed: 7,
	}
}

// stream is a fixed cycle, learnable from one token of context.
func stream(n int) []int {
	cycle := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4}
	out := make([]int, n)
	for i := range out {
		out[i] = cycle[i%len(cycle)] // after "5" comes 9, 3 or 8: the model needs context
	}
	return out
}

func cpu(t *testing.T) mx.Backend {
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTrainLearnsAndIsDeterministic(t *testing.T) {
	b := cpu(t)
	var losses []float64
	var done int
	m, res, err := Run(context.Background(), b, tinyConfig(), stream(2000), func(ev trainer.Event) {
		switch ev.Kind {
		case trainer.EventTrain:
			losses = append(losses, ev.Loss)
			if ev.Iters != 60 || ev.Tokens != int64(ev.Step*4*16) || !(ev.TokensPerSec > 0) {
				t.Errorf("event %+v: want 60 iters, %d tokens and a speed", ev, ev.Step*4*16)
			}
		case trainer.EventDone:
			done++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(losses) != 60 || done != 1 || res.Steps != 60 || res.Tokens != 60*4*16 {
		t.Fatalf("%d progress reports, %d done, result %+v", len(losses), done, res)
	}
	if losses[0] != res.FirstLoss {
		t.Errorf("first event's loss %v, result's first loss %v", losses[0], res.FirstLoss)
	}
	t.Logf("loss %.3f → %.3f, %d params", res.FirstLoss, res.FinalLoss, res.Params)
	if res.FinalLoss > res.FirstLoss/3 {
		t.Errorf("loss %.3f → %.3f: want a drop of 3× at least", res.FirstLoss, res.FinalLoss)
	}
	// Every weight was trained, norms and embeddings included.
	init, err := Init(tinyConfig().Model, 0.02, 7, b)
	if err != nil {
		t.Fatal(err)
	}
	before := init.Params()
	for name, p := range m.Params() {
		d, err := mx.Sum(mx.Abs(mx.Sub(p, before[name])), nil, false).Item()
		if err != nil {
			t.Fatal(err)
		}
		if d == 0 {
			t.Errorf("%s did not change", name)
		}
	}
	// The same seed gives the same run.
	var progress int
	_, res2, err := Run(context.Background(), b, tinyConfig(), stream(2000), func(ev trainer.Event) {
		if ev.Kind == trainer.EventTrain {
			progress++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res2.FinalLoss != res.FinalLoss || progress != 60 {
		t.Errorf("same seed, final loss %v then %v (%d progress reports)", res.FinalLoss, res2.FinalLoss, progress)
	}

	dir := t.TempDir()
	if err := Save(m, filepath.Join(dir, "m"), mx.BFloat16); err != nil {
		t.Fatal(err)
	}
	back, err := inference.Load(filepath.Join(dir, "m"), b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config().TorchDType != "bfloat16" || ParamCount(back) != res.Params {
		t.Errorf("saved model: dtype %q, %d params (want %d)", back.Config().TorchDType, ParamCount(back), res.Params)
	}
}

func TestTrainRejectsBadInput(t *testing.T) {
	b := cpu(t)
	c := tinyConfig()
	if _, _, err := Run(context.Background(), b, c, stream(10), nil); err == nil {
		t.Error("a stream shorter than a window was accepted")
	}
	if _, _, err := Run(context.Background(), b, c, []int{99, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2}, nil); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := Run(ctx, b, c, stream(2000), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: err = %v, want context.Canceled", err)
	}
	c.LR = 1e30 // the first update blows the weights up
	if _, _, err := Run(context.Background(), b, c, stream(2000), nil); !errors.Is(err, trainer.ErrNonFinite) {
		t.Errorf("a diverging run: err = %v, want trainer.ErrNonFinite", err)
	}
}
