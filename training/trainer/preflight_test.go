package trainer

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
)

// bareModel is a small random llama in memory with no adapter: hidden 32, so
// k_proj/v_proj map 32 → 16 (two key/value heads of 8) and a LoRA rank may
// be at most 16; 64 positions.
func bareModel(t testing.TB) *inference.Model {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return inference.NewRandom(inference.Config{
		ModelType: "llama", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-5, RopeTheta: 10000,
		VocabSize: 40, TieWordEmbeddings: true, MaxPositionEmbeddings: 64,
	}, 1, b)
}

// examplesOf makes n examples of length tokens, every position learned.
func examplesOf(n, length int) []data.Example {
	ex := make([]data.Example, n)
	for i := range ex {
		ex[i].Tokens = make([]int32, length)
		ex[i].Mask = make([]bool, length)
		for j := range length {
			ex[i].Tokens[j] = int32((i + j) % 40)
			ex[i].Mask[j] = true
		}
	}
	return ex
}

// withAvailable pretends the system has n bytes available.
func withAvailable(t *testing.T, n int64) {
	prev := systemAvailable
	systemAvailable = func() int64 { return n }
	t.Cleanup(func() { systemAvailable = prev })
}

// untouched checks that a refused run left m without an adapter and the
// backend holding no more array memory than before: nothing was allocated.
func untouched(t *testing.T, m *inference.Model, arraysBefore int64) {
	t.Helper()
	if n := len(m.Adapters()); n != 0 {
		t.Errorf("the refused run pushed %d adapters", n)
	}
	if arrays, _, _ := cpu.MemoryDetail(); arrays > arraysBefore {
		t.Errorf("the refused run left %d more bytes of arrays", arrays-arraysBefore)
	}
}

// A rank is checked against the layers it adapts before any adapter is made:
// --rank 1000000000 used to die with "fatal error: out of memory" (and a
// larger one panicked in makeslice) while making them.
func TestRankCheckedAgainstModel(t *testing.T) {
	for _, tt := range []struct {
		rank int
		keys []string
		want string // "" trains
	}{
		{1_000_000_000, nil, "LoRA rank 1000000000 is more than the adapted layers allow: the rank must be at most min(in, out) = 16 (model.layers.0.self_attn.k_proj: 32 → 16)"},
		{math.MaxInt, nil, "at most min(in, out) = 16"},
		{17, nil, "at most min(in, out) = 16"},
		{16, nil, ""},
		{32, []string{"self_attn.q_proj"}, ""},
		{33, []string{"self_attn.q_proj", "mlp.up_proj"}, "at most min(in, out) = 32 (model.layers.0.self_attn.q_proj: 32 → 32)"},
	} {
		m := bareModel(t)
		before, _, _ := cpu.MemoryDetail()
		opts := Options{LoRA: lora.Config{NumLayers: -1, Rank: tt.rank, Keys: tt.keys}, Iters: 1, BatchSize: 2, StepsPerReport: 1}
		_, _, err := TrainAdapter(context.Background(), m, examplesOf(4, 8), opts, nil)
		if tt.want == "" {
			if err != nil {
				t.Errorf("rank %d: %v", tt.rank, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("rank %d: got %v, want an error containing %q", tt.rank, err, tt.want)
		}
		untouched(t, m, before)
	}
}

// A run whose estimate is more than the system has is refused before its
// adapters, optimizer or activations exist, with the estimate in the error;
// Force runs it anyway.
func TestMemoryRefusedBeforeAllocation(t *testing.T) {
	withAvailable(t, 1<<10) // 1 KiB: the tiny model's weights alone are more
	m := bareModel(t)
	before, _, _ := cpu.MemoryDetail()
	opts := Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 2, BatchSize: 2, StepsPerReport: 1}
	_, _, err := TrainAdapter(context.Background(), m, examplesOf(4, 8), opts, nil)
	var me *MemoryError
	if !errors.Is(err, ErrWontFit) || !errors.As(err, &me) {
		t.Fatalf("got %v, want a MemoryError matching ErrWontFit", err)
	}
	const adapters = 2 * 4 * (2*(32+32) + 2*(32+16) + 3*(32+64)) // 2 layers × rank 4 × (q, o; k, v; gate, up, down)
	if me.Available != 1<<10 || me.Total() <= me.Available || me.Batch != 2 || me.Seq != 7 || me.Rank != 4 || me.Adapters != adapters {
		t.Errorf("estimate %+v, want batch 2 × 7 tokens, rank 4 and the adapters counted", me)
	}
	for _, want := range []string{"needs about", "1.0 KiB available", "batch 2 × 7 tokens", "rank 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	untouched(t, m, before)

	opts.Force = true
	if _, res, err := TrainAdapter(context.Background(), m, examplesOf(4, 8), opts, nil); err != nil || res.Steps != 2 {
		t.Fatalf("forced: %d steps, %v; want the run", res.Steps, err)
	}
}

// Sizes far past anything real are refused or capped, never overflowed into
// a small estimate or a crash.
func TestHugeSizesRefused(t *testing.T) {
	withAvailable(t, 64<<30)
	for _, tt := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"batch", func(o *Options) { o.BatchSize = math.MaxInt }, ""},  // capped by the examples: fits
		{"seq", func(o *Options) { o.MaxSeqLength = math.MaxInt }, ""}, // capped by the model: fits
		{"iters", func(o *Options) { o.Iters = math.MaxInt }, "must be at most"},
		{"epochs", func(o *Options) { o.Epochs = math.MaxInt }, "must be at most"},
		{"grad accumulation", func(o *Options) { o.GradAccumulation = math.MaxInt }, "must be at most"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := bareModel(t)
			opts := Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 1, BatchSize: 2, StepsPerReport: 1}
			tt.edit(&opts)
			_, _, err := TrainAdapter(context.Background(), m, examplesOf(4, 8), opts, nil)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	// The estimate itself saturates instead of wrapping around.
	e := EstimateMemory(1<<30, 4096, 11008, 32, 32, 32000, math.MaxInt, math.MaxInt, math.MaxInt64, Saving{})
	if e.Activations != math.MaxInt64 || e.Optimizer != math.MaxInt64 || e.Total() < 0 {
		t.Errorf("estimate %+v, want saturated parts", e)
	}
}

// --max-seq-length defaults to 2048; a model that reads 512 positions trains
// on its first 512, and says so once, instead of failing the run at the
// first long document with "2048 positions exceed max_position_embeddings".
func TestMaxSeqLengthClampedToModel(t *testing.T) {
	dir := t.TempDir()
	model := tinyModelDir(t, dir) // 512 positions
	long := strings.Repeat("the cat sat on the mat and ", 60)
	path := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(path, []byte(`{"text": "`+long+`"}`+"\n"+`{"text": "a short one"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(model, path, filepath.Join(dir, "out"))
	cfg.Iters, cfg.MaxSeqLength, cfg.SaveEvery, cfg.StepsPerEval = 2, DefaultMaxSeqLength, -1, -1
	_, evs, err := collect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	for _, ev := range evs {
		if strings.Contains(ev.Message, "max sequence length 2048 is more than the 512 positions this model reads: using 512") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("the clamp was reported %d times, want once", said)
	}
}

// A run that the estimate says will not fit plainly, but fits with every block
// checkpointed, runs checkpointed and learns exactly what the plain run learns
// (up to float32 rounding); asked for, checkpointing is on whatever the memory.
func TestCheckpointWhenMemoryShort(t *testing.T) {
	opts := Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 3, BatchSize: 2, StepsPerReport: 1, LearningRate: 1e-2}
	train := func(opts Options) (*adapterRun, map[string]*mx.Array) {
		a, err := newAdapterRun(bareModel(t), examplesOf(4, 40), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.loop(context.Background()); err != nil {
			t.Fatal(err)
		}
		return a, a.params
	}
	withAvailable(t, 64<<30)
	plainRun, plain := train(opts)
	if plainRun.checkpoint || plainRun.memory.Checkpointed {
		t.Fatalf("checkpointed with memory to spare")
	}
	me, mc := plainRun.memory, plainRun.m.Config()
	ck := EstimateMemory(me.Weights, mc.HiddenSize, mc.IntermediateSize, mc.NumAttentionHeads, mc.NumHiddenLayers, mc.VocabSize, me.Batch, me.Seq, me.Adapters, savingFor(plainRun.m.Backend(), true))
	if ck.Total() >= me.Total() {
		t.Fatalf("checkpointed estimate %d bytes, plain %d: no saving", ck.Total(), me.Total())
	}
	for _, tt := range []struct {
		name      string
		available int64
		ask       bool
	}{{"memory short", (ck.Total() + me.Total()) / 2, false}, {"asked", 64 << 30, true}} {
		t.Run(tt.name, func(t *testing.T) {
			withAvailable(t, tt.available)
			o := opts
			o.GradCheckpoint = tt.ask
			a, got := train(o)
			if !a.checkpoint || !a.memory.Checkpointed || !a.memory.Fits() {
				t.Fatalf("checkpoint %v, estimate %+v: want a checkpointed run that fits", a.checkpoint, a.memory.Estimate)
			}
			sameParams(t, "", plain, got)
		})
	}
	// With LoRA dropout: a block computed again draws the masks it drew the
	// first time, so the gradients are the plain run's.
	withAvailable(t, 64<<30)
	drop := opts
	drop.LoRA.Dropout = 0.2
	_, plainDrop := train(drop)
	drop.GradCheckpoint = true
	_, ckDrop := train(drop)
	sameParams(t, "with dropout, ", plainDrop, ckDrop)
	// Short even checkpointed: refused.
	withAvailable(t, ck.Total()-1)
	if _, err := newAdapterRun(bareModel(t), examplesOf(4, 40), opts, nil); !errors.Is(err, ErrWontFit) {
		t.Errorf("a run that does not fit checkpointed either: %v", err)
	}
}

// ownAutodiff stands for a backend with its own autodiff (MLX): its checkpoints
// run plainly and save nothing. It is never asked to differentiate here.
type ownAutodiff struct{ mx.Backend }

func (ownAutodiff) ValueAndGrad(func([]*mx.Array) []*mx.Array, []*mx.Array) ([]*mx.Array, []*mx.Array, error) {
	panic("not differentiated in this test")
}

// The estimate counts what the backend's checkpoints save and nothing more: on a
// backend with its own autodiff the loss's logits are all held and blocks are not
// recomputed, so a run there is neither checkpointed nor admitted on a
// checkpointed estimate, and asking for it says it does nothing.
func TestSavingFollowsTheBackend(t *testing.T) {
	m := bareModel(t)
	if s := savingFor(m.Backend(), true); !s.ChunkedLoss || !s.Checkpoint {
		t.Errorf("cpu backend: %+v", s)
	}
	own := ownAutodiff{m.Backend()}
	if s := savingFor(own, true); s.ChunkedLoss || s.Checkpoint {
		t.Errorf("a backend with its own autodiff: %+v", s)
	}
	const vocab = 151936
	whole := EstimateMemory(1<<20, 1024, 3072, 16, 28, vocab, 1, 512, 1<<20, Saving{})
	chunked := EstimateMemory(1<<20, 1024, 3072, 16, 28, vocab, 1, 512, 1<<20, Saving{ChunkedLoss: true})
	if d := whole.Activations - chunked.Activations; d < 512*vocab*12/2 {
		t.Errorf("a 512-token row's logits: %d bytes more held unchunked, want most of %d", d, 512*vocab*12)
	}

	mo := inference.NewRandom(m.Config(), 1, own)
	var warned []string
	withAvailable(t, 64<<30)
	a, err := newAdapterRun(mo, examplesOf(4, 40), Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 1, BatchSize: 2, GradCheckpoint: true},
		func(ev Event) {
			if ev.Kind == EventWarning {
				warned = append(warned, ev.Message)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if a.checkpoint || a.memory.Checkpointed || len(warned) != 1 || !strings.Contains(warned[0], "grad checkpoint") {
		t.Errorf("asked to checkpoint on a backend that cannot: checkpoint %v, estimate %+v, warnings %q", a.checkpoint, a.memory.Estimate, warned)
	}
	// Short of memory there, the run is refused, not admitted on savings it
	// would not have.
	me, mc := a.memory, mo.Config()
	ck := EstimateMemory(me.Weights, mc.HiddenSize, mc.IntermediateSize, mc.NumAttentionHeads, mc.NumHiddenLayers, mc.VocabSize, me.Batch, me.Seq, me.Adapters, Saving{ChunkedLoss: true, Checkpoint: true})
	withAvailable(t, (ck.Total()+me.Total())/2)
	if _, err := newAdapterRun(mo, examplesOf(4, 40), Options{LoRA: lora.Config{NumLayers: -1, Rank: 4}, Iters: 1, BatchSize: 2}, nil); !errors.Is(err, ErrWontFit) {
		t.Errorf("a run that fits only checkpointed, on a backend that cannot: %v", err)
	}
}

// sameParams fails unless the checkpointed run's adapter is the plain run's to 1e-5.
func sameParams(t *testing.T, what string, plain, checkpointed map[string]*mx.Array) {
	t.Helper()
	for n, p := range plain {
		want, _ := p.Float32s()
		have, _ := checkpointed[n].Float32s()
		for i := range want {
			if d := math.Abs(float64(want[i] - have[i])); d > 1e-5 {
				t.Fatalf("%s%s[%d]: %g checkpointed, %g plainly", what, n, i, have[i], want[i])
			}
		}
	}
}
