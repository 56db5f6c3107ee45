package trainer

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// tinyModel is a small random llama in memory, with fresh LoRA adapters on
// every linear layer of its blocks; nothing touches the disk.
func tinyModel(t testing.TB) *inference.Model {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m := inference.NewRandom(inference.Config{
		ModelType: "llama", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-5, RopeTheta: 10000,
		VocabSize: 40, TieWordEmbeddings: true, MaxPositionEmbeddings: 64,
	}, 1, b)
	if _, err := lora.Apply(m, lora.Config{NumLayers: -1, Rank: 4, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	return m
}

// batchOf builds a batch from rows of equal length, learning the positions
// where learn is true.
func batchOf(rows [][]int32, learn [][]bool) data.Batch {
	L := len(rows[0]) - 1
	bt := data.Batch{B: len(rows), L: L}
	for r, row := range rows {
		bt.IDs = append(bt.IDs, row[:L]...)
		bt.Targets = append(bt.Targets, row[1:]...)
		for j := 0; j < L; j++ {
			var v float32
			if learn[r][j] {
				v = 1
			}
			bt.Mask = append(bt.Mask, v)
		}
		bt.Lengths = append(bt.Lengths, int32(L))
	}
	return bt
}

var (
	rowA   = []int32{1, 5, 9, 13, 17, 21, 25}
	rowB   = []int32{2, 4, 8, 16, 32, 3, 6}
	learnA = []bool{false, false, false, true, true, true} // 3 learned positions
	learnB = []bool{true, true, true, true, true, false}   // 5
)

func sgdStepper(m *inference.Model, lr float32) *Stepper {
	return &Stepper{Bind: Adapters(m), Optimizer: optim.NewSGD(optim.Constant(lr))}
}

func maxDiff(t *testing.T, a, b map[string]*mx.Array) float64 {
	t.Helper()
	var worst float64
	for name, x := range a {
		xv, err := x.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		yv, err := b[name].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range xv {
			worst = max(worst, math.Abs(float64(xv[i]-yv[i])))
		}
	}
	return worst
}

// Accumulating two micro-batches weighted by their learned positions is the
// step on the batch that holds both rows, and the step's loss is their
// token-weighted mean.
func TestStepAccumulationIsTheWholeBatch(t *testing.T) {
	ctx := context.Background()
	m := tinyModel(t)
	start := lora.Params(m)
	whole := sgdStepper(m, 0.5)
	r1, err := whole.Step(ctx, start, []Batch{NextToken(batchOf([][]int32{rowA, rowB}, [][]bool{learnA, learnB}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := lora.SetParams(m, start); err != nil {
		t.Fatal(err)
	}
	parts := sgdStepper(m, 0.5)
	r2, err := parts.Step(ctx, start, []Batch{
		NextToken(batchOf([][]int32{rowA}, [][]bool{learnA})),
		NextToken(batchOf([][]int32{rowB}, [][]bool{learnB})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Weight != 8 || r2.Weight != 8 || r1.Tokens != 12 || r2.Tokens != 12 || r2.Step != 1 {
		t.Errorf("weights %v, %v; tokens %d, %d; step %d: want 8, 8; 12, 12; 1", r1.Weight, r2.Weight, r1.Tokens, r2.Tokens, r2.Step)
	}
	if d := math.Abs(r1.Loss - r2.Loss); d > 1e-5 {
		t.Errorf("loss %v whole, %v accumulated", r1.Loss, r2.Loss)
	}
	if d := maxDiff(t, r1.Params, r2.Params); d > 1e-5 {
		t.Errorf("accumulated update differs from the whole batch's by %g", d)
	}
	if d := maxDiff(t, r1.Params, start); d == 0 {
		t.Error("the step did not move the adapters")
	}
	// The model is bound to the new parameters, the old ones are untouched.
	if d := maxDiff(t, lora.Params(m), r2.Params); d != 0 {
		t.Errorf("model holds weights %g away from the step's result", d)
	}
	if !math.IsNaN(r1.GradNorm) {
		t.Errorf("grad norm %v without clipping, want NaN", r1.GradNorm)
	}
}

func TestStepClipsAndReportsNorm(t *testing.T) {
	m := tinyModel(t)
	s := sgdStepper(m, 0.1)
	s.ClipNorm = 1e-3
	bt := NextToken(batchOf([][]int32{rowA}, [][]bool{learnA}))
	start := lora.Params(m)
	r, err := s.Step(context.Background(), start, []Batch{bt})
	if err != nil {
		t.Fatal(err)
	}
	if !(r.GradNorm > 1e-3) || r.LR != float64(float32(0.1)) {
		t.Fatalf("grad norm %v, lr %v: want a norm above the clip and lr 0.1", r.GradNorm, r.LR)
	}
	// SGD moved the adapters by lr × a gradient of norm 1e-3.
	var sq float64
	for name, p := range r.Params {
		d, _ := mx.Sum(mx.Square(mx.Sub(p, start[name])), nil, false).Item()
		sq += float64(d)
	}
	if got := math.Sqrt(sq); math.Abs(got-1e-4) > 1e-6 {
		t.Errorf("update norm %g, want 1e-4 (lr 0.1 × clipped norm 1e-3)", got)
	}
}

var errSentinel = errors.New("sentinel from inside the loss")

// An error met inside the differentiated function reaches Step's caller with
// its errors.Is chain, whether the binder or the loss returns it, and the
// optimizer and model are left as they were.
func TestStepKeepsErrorChain(t *testing.T) {
	m := tinyModel(t)
	start := lora.Params(m)
	ok := NextToken(batchOf([][]int32{rowA}, [][]bool{learnA}))

	t.Run("bind", func(t *testing.T) {
		s := sgdStepper(m, 0.1)
		inner := s.Bind
		s.Bind = func(p map[string]*mx.Array) (*inference.Model, error) {
			if p["model.layers.0.mlp.up_proj.lora_a"] != start["model.layers.0.mlp.up_proj.lora_a"] { // traced
				return nil, errSentinel
			}
			return inner(p)
		}
		_, err := s.Step(context.Background(), start, []Batch{ok})
		if !errors.Is(err, errSentinel) {
			t.Fatalf("err = %v, want errSentinel in its chain", err)
		}
		if s.Optimizer.Steps() != 0 {
			t.Errorf("optimizer advanced to %d after a failed step", s.Optimizer.Steps())
		}
	})
	t.Run("set params", func(t *testing.T) {
		// lora.SetParams refusing what it is given inside the traced function:
		// its very error is in the chain.
		var cause error
		s := sgdStepper(m, 0.1)
		s.Bind = func(p map[string]*mx.Array) (*inference.Model, error) {
			if p["model.layers.0.mlp.up_proj.lora_a"] == start["model.layers.0.mlp.up_proj.lora_a"] {
				return m, lora.SetParams(m, p)
			}
			bad := map[string]*mx.Array{"model.layers.0.mlp.up_proj.lora_a": mx.Full(m.Backend(), []int{1, 1}, 0, mx.Float32)}
			cause = lora.SetParams(m, bad)
			return m, cause
		}
		_, err := s.Step(context.Background(), start, []Batch{ok})
		if cause == nil || !errors.Is(err, cause) {
			t.Fatalf("err = %v, want %v in its chain", err, cause)
		}
	})
	t.Run("cancelled inside the loss", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := sgdStepper(m, 0.1)
		b := ok
		b.Loss = func(m *inference.Model, p map[string]*mx.Array) *mx.Array {
			cancel() // the run is cancelled while the loss is being traced
			if err := ctx.Err(); err != nil {
				return mx.Errorf("loss: %w", err)
			}
			return ok.Loss(m, p)
		}
		_, err := s.Step(ctx, start, []Batch{b})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled in its chain", err)
		}
		if d := maxDiff(t, lora.Params(m), start); d != 0 {
			t.Errorf("the model kept other weights after a failed step (%g away)", d)
		}
	})
}

func TestStepRefusesNonFinite(t *testing.T) {
	m := tinyModel(t)
	start := lora.Params(m)
	ok := NextToken(batchOf([][]int32{rowA}, [][]bool{learnA}))
	nan := ok
	nan.Loss = func(m *inference.Model, p map[string]*mx.Array) *mx.Array {
		return mx.MulScalar(ok.Loss(m, p), float32(math.NaN()))
	}
	// A finite loss with a NaN gradient: 0·Σ√|x| is 0, but its gradient at
	// LoRA's zero-initialised B is 0·∞.
	nanGrad := ok
	nanGrad.Loss = func(m *inference.Model, p map[string]*mx.Array) *mx.Array {
		l := ok.Loss(m, p)
		for _, x := range p {
			l = mx.Add(l, mx.MulScalar(mx.Sum(mx.Sqrt(mx.Abs(x)), nil, false), 0))
		}
		return l
	}
	for _, c := range []struct {
		name  string
		lr    float32
		clip  float64
		batch Batch
		says  string
	}{
		{"loss", 0.1, 0, nan, "loss of micro-batch 0 is NaN"},
		{"gradient", 0.1, 0, nanGrad, "gradient of"},
		{"gradient clipped", 0.1, 1, nanGrad, "gradient of"},
		{"update", float32(math.Inf(1)), 0, ok, "update of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sgdStepper(m, c.lr)
			s.ClipNorm = c.clip
			_, err := s.Step(context.Background(), start, []Batch{c.batch})
			if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err = %v, want ErrNonFinite saying %q", err, c.says)
			}
			if s.Optimizer.Steps() != 0 {
				t.Errorf("optimizer kept a refused update (%d steps)", s.Optimizer.Steps())
			}
			if d := maxDiff(t, lora.Params(m), start); d != 0 {
				t.Errorf("the model kept a refused update (%g away)", d)
			}
		})
	}
}

func TestEvaluateIsTokenWeighted(t *testing.T) {
	ctx := context.Background()
	m := tinyModel(t)
	s := sgdStepper(m, 0.1)
	params := lora.Params(m)
	a := NextToken(batchOf([][]int32{rowA}, [][]bool{learnA}))
	b := NextToken(batchOf([][]int32{rowB}, [][]bool{learnB}))
	la, _ := a.Loss(m, params).Item()
	lb, _ := b.Loss(m, params).Item()
	got, err := s.Evaluate(ctx, params, slices.Values([]Batch{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	want := (3*float64(la) + 5*float64(lb)) / 8
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("Evaluate = %v, want %v", got, want)
	}
	if got, _ := s.Evaluate(ctx, params, slices.Values([]Batch(nil))); !math.IsNaN(got) {
		t.Errorf("Evaluate of nothing = %v, want NaN", got)
	}
}
