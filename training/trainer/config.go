package trainer

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// mlx-lm's defaults (mlx_lm.lora's CONFIG_DEFAULTS) where they exist.
const (
	DefaultIters            = 1000
	DefaultBatchSize        = 4
	DefaultLearningRate     = 1e-5
	DefaultStepsPerReport   = 10
	DefaultStepsPerEval     = 200
	DefaultValBatches       = 25
	DefaultTestBatches      = 500
	DefaultSaveEvery        = 100
	DefaultMaxSeqLength     = 2048
	DefaultGradAccumulation = 1
)

// Options is one adapter training run on an in-memory model and examples (see
// TrainAdapter). Zero fields take the defaults above, and lora's for the
// adapter shape.
type Options struct {
	// LoRA shapes the adapters; LoRA.Dropout applies while training,
	// LoRA.Seed draws their initial weights.
	LoRA lora.Config
	// Init, when set, holds adapter weights to start from instead of fresh
	// ones (the current adapter, to continue training it), by lora.Params'
	// names; every adapter LoRA selects must be there.
	Init map[string]*mx.Array `json:"-"`

	Iters            int     // optimizer updates
	Epochs           int     // when > 0, sets Iters to this many passes over the examples
	BatchSize        int     // rows per micro-batch
	GradAccumulation int     // micro-batches per update
	LearningRate     float64 // peak rate
	Optimizer        string  // "adam" (mlx-lm's default), "adamw" or "sgd"
	WeightDecay      float64 // adamw's λ; 0 with adamw means 0.01
	Warmup           int     // linear warmup steps (with cosine decay after)
	Cosine           bool    // cosine decay to MinLearningRate over the run
	MinLearningRate  float64
	// Schedule, when set, replaces LearningRate/Warmup/Cosine.
	Schedule     optim.Schedule `json:"-"`
	ClipGradNorm float64        // global-norm clipping; 0 is off

	MaxSeqLength int
	PadID        int32  // token that pads short rows (the end-of-sequence id is usual)
	Seed         uint64 // batch order and dropout masks

	StepsPerReport int
	// Valid is the validation set, scored every StepsPerEval updates (-1 is
	// never) and at the end, on ValBatches batches (-1 is all of it).
	Valid        []data.Example `json:"-"`
	StepsPerEval int
	ValBatches   int

	// GradCheckpoint recomputes every block in the backward pass instead of
	// keeping its intermediates: the activations of one block are held
	// instead of all of them, for about a third more time per step. It is
	// turned on by itself when the memory estimate without it is more than
	// the system has available and the one with it is not.
	GradCheckpoint bool
	// Force runs even when the memory estimate is more than the system has
	// available (the run is refused with a MemoryError otherwise).
	Force bool
}

func (o Options) withDefaults() Options {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Iters, DefaultIters)
	def(&o.BatchSize, DefaultBatchSize)
	def(&o.GradAccumulation, DefaultGradAccumulation)
	def(&o.StepsPerReport, DefaultStepsPerReport)
	def(&o.StepsPerEval, DefaultStepsPerEval)
	def(&o.ValBatches, DefaultValBatches)
	def(&o.MaxSeqLength, DefaultMaxSeqLength)
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.Optimizer == "" {
		o.Optimizer = "adam"
	}
	o.LoRA = o.LoRA.WithDefaults()
	return o
}

func (o Options) validate() error {
	switch {
	case o.Iters < 1, o.BatchSize < 1, o.GradAccumulation < 1, o.MaxSeqLength < 2, o.StepsPerReport < 1:
		return fmt.Errorf("trainer: iters %d, batch size %d, grad accumulation %d, max seq length %d and steps per report %d must be positive",
			o.Iters, o.BatchSize, o.GradAccumulation, o.MaxSeqLength, o.StepsPerReport)
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0):
		return fmt.Errorf("trainer: learning rate %g", o.LearningRate)
	case o.Warmup < 0 || o.Warmup >= o.Iters && o.Warmup > 0:
		return fmt.Errorf("trainer: warmup %d must be below iters %d", o.Warmup, o.Iters)
	case o.ClipGradNorm < 0:
		return fmt.Errorf("trainer: clip grad norm %g", o.ClipGradNorm)
	case o.Epochs < 0:
		return fmt.Errorf("trainer: epochs %d", o.Epochs)
	case o.Iters > maxIters, o.Epochs > maxEpochs, o.GradAccumulation > maxGradAccum:
		return fmt.Errorf("trainer: iters %d, epochs %d and grad accumulation %d must be at most %d, %d and %d",
			o.Iters, o.Epochs, o.GradAccumulation, maxIters, maxEpochs, maxGradAccum)
	}
	switch o.Optimizer {
	case "adam", "adamw", "sgd":
	default:
		return fmt.Errorf("trainer: optimizer %q (adam, adamw or sgd)", o.Optimizer)
	}
	return o.LoRA.Validate()
}

func (o Options) schedule() optim.Schedule {
	if o.Schedule != nil {
		return o.Schedule
	}
	lr := float32(o.LearningRate)
	if o.Cosine || o.Warmup > 0 {
		decay := o.Iters - o.Warmup
		if !o.Cosine {
			decay = 0 // warmup, then flat
		}
		return optim.WarmupCosine(lr, o.Warmup, decay, float32(o.MinLearningRate))
	}
	return optim.Constant(lr)
}

func (o Options) optimizer() optim.Optimizer {
	s := o.schedule()
	switch o.Optimizer {
	case "adamw":
		a := optim.NewAdamW(s)
		if o.WeightDecay != 0 {
			a.WeightDecay = o.WeightDecay
		}
		return a
	case "sgd":
		g := optim.NewSGD(s)
		g.WeightDecay = o.WeightDecay
		return g
	}
	a := optim.NewAdam(s)
	a.WeightDecay = o.WeightDecay
	return a
}

// Config is one training run from files: a model folder, a data file or
// folder, and a run folder for the adapter and its checkpoints (see Run).
// Zero fields take the defaults above (and lora's for the adapter shape);
// AdapterPath has none.
type Config struct {
	Model string // model folder (Hugging Face or mlx-community layout; a quantized one gives QLoRA)
	Data  string // a JSONL file, an mlx-lm data folder (train/valid/test.jsonl) or a folder of documents

	// BackendImpl is the backend to train on, opened by the caller. When nil,
	// Backend names one for mlxbridge.Open ("auto", "cpu" or "mlx"). Neither
	// becomes mlxbridge's default.
	BackendImpl mx.Backend `json:"-"`
	Backend     string
	// DType is the type the base weights are loaded in and the forward pass
	// computes in: "float32" (also ""), "bfloat16", "float16" or "auto", the
	// checkpoint's own, as mlx-lm trains (inference.ParseDType). The adapters
	// stay float32 whatever it is.
	DType string `json:",omitempty"`

	// AdapterPath is the run directory: the final adapter in mlx-lm's layout
	// and checkpoints/ for resuming. Required.
	AdapterPath string

	Iters            int     // optimizer updates
	Epochs           int     // when > 0, sets Iters to this many passes over the training set
	BatchSize        int     // rows per micro-batch
	GradAccumulation int     // micro-batches per update
	LearningRate     float64 // peak rate
	Optimizer        string  // "adam" (mlx-lm's default), "adamw" or "sgd"
	WeightDecay      float64 // adamw's λ; 0 with adamw means 0.01
	Warmup           int     // linear warmup steps (with cosine decay after)
	Cosine           bool    // cosine decay to MinLearningRate over the run
	MinLearningRate  float64
	// Schedule, when set, replaces LearningRate/Warmup/Cosine.
	Schedule     optim.Schedule `json:"-"`
	ClipGradNorm float64        // global-norm clipping; 0 is off

	// LoRA
	NumLayers int // last N blocks; 0 means 16, -1 all
	Rank      int
	Scale     float64
	Dropout   float64
	Keys      []string

	MaxSeqLength    int
	StepsPerReport  int
	StepsPerEval    int // validation every N updates (and at the end); -1 is never
	ValBatches      int // -1 is the whole validation set
	TestBatches     int // -1 is the whole test set
	SaveEvery       int // checkpoint every N updates; -1 only at the end
	KeepCheckpoints int // checkpoints kept on disk; 0 keeps all
	ChunkSize       int // tokens per chunk of a documents folder; 0 is 512
	Seed            uint64
	Resume          bool // continue from the newest good checkpoint in AdapterPath
	GradCheckpoint  bool // see Options.GradCheckpoint
	// Force runs even when the memory estimate is more than the system has
	// available (the run is refused with a MemoryError otherwise).
	Force bool
}

func (c Config) withDefaults() Config {
	o := c.options().withDefaults()
	c.Iters, c.BatchSize, c.GradAccumulation, c.StepsPerReport = o.Iters, o.BatchSize, o.GradAccumulation, o.StepsPerReport
	c.StepsPerEval, c.ValBatches, c.MaxSeqLength = o.StepsPerEval, o.ValBatches, o.MaxSeqLength
	c.LearningRate, c.Optimizer = o.LearningRate, o.Optimizer
	if c.TestBatches == 0 {
		c.TestBatches = DefaultTestBatches
	}
	if c.SaveEvery == 0 {
		c.SaveEvery = DefaultSaveEvery
	}
	if c.Backend == "" {
		c.Backend = "auto"
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Model == "":
		return errors.New("trainer: no model folder")
	case c.Data == "":
		return errors.New("trainer: no data")
	case c.AdapterPath == "":
		return errors.New("trainer: no adapter path (the run folder)")
	case c.KeepCheckpoints < 0:
		return fmt.Errorf("trainer: keep checkpoints %d", c.KeepCheckpoints)
	}
	if _, err := inference.ParseDType(c.DType); err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	return c.options().validate()
}

// loraConfig is the adapter shape c asks for.
func (c Config) loraConfig() lora.Config {
	return lora.Config{NumLayers: c.NumLayers, Rank: c.Rank, Scale: c.Scale, Dropout: c.Dropout, Keys: c.Keys, Seed: c.Seed}.WithDefaults()
}

// options is the training part of c; the data and pad id come from the files.
func (c Config) options() Options {
	return Options{
		LoRA: c.loraConfig(), Iters: c.Iters, Epochs: c.Epochs, BatchSize: c.BatchSize, GradAccumulation: c.GradAccumulation,
		LearningRate: c.LearningRate, Optimizer: c.Optimizer, WeightDecay: c.WeightDecay, Warmup: c.Warmup, Cosine: c.Cosine,
		MinLearningRate: c.MinLearningRate, Schedule: c.Schedule, ClipGradNorm: c.ClipGradNorm,
		MaxSeqLength: c.MaxSeqLength, Seed: c.Seed, StepsPerReport: c.StepsPerReport,
		StepsPerEval: c.StepsPerEval, ValBatches: c.ValBatches, Force: c.Force, GradCheckpoint: c.GradCheckpoint,
	}
}

// EventKind says what an Event reports.
type EventKind int

const (
	EventInfo       EventKind = iota // Message: what the run is doing (data loaded, resumed, …)
	EventWarning                     // Message: something the user should know (memory, bad rows)
	EventTrain                       // Loss (mean since the last report), LR, TokensPerSec, Tokens, Elapsed, ETA, PeakMemory
	EventVal                         // ValLoss
	EventCheckpoint                  // Path
	EventTest                        // TestLoss, TestPerplexity
	EventDone                        // Step; Path: the final adapter or model, when written
)

func (k EventKind) String() string {
	return [...]string{"info", "warning", "train", "val", "checkpoint", "test", "done"}[k]
}

// Event is one progress report of a training job: the LoRA trainer, the
// pretrainer and the adaptation loops built on Stepper all report with it,
// through a func(Event) callback the caller passes in. The callback runs on
// the training goroutine; the run waits for it.
type Event struct {
	Kind           EventKind
	Step, Iters    int
	Loss           float64
	ValLoss        float64
	TestLoss       float64
	TestPerplexity float64
	LR             float64
	TokensPerSec   float64
	Tokens         int64         // trained tokens so far (this process)
	Elapsed        time.Duration // since the training loop began (this process)
	ETA            time.Duration
	PeakMemory     int64 // bytes, where the backend reports it
	Path           string
	Message        string
	// Memory is the estimate an EventInfo or EventWarning about memory is
	// based on, so a caller can phrase its own advice (a smaller batch, a
	// shorter sequence, a quantized model).
	Memory *Estimate
}

// Result summarizes a run.
type Result struct {
	Steps          int // optimizer updates done, counting those before a resume
	ResumedFrom    int // step of the checkpoint resumed from, or 0
	TrainLoss      float64
	ValLoss        float64 // NaN when there is no validation set
	TestLoss       float64 // NaN when there is no test set
	TestPerplexity float64
	Tokens         int64
	Duration       time.Duration
	AdapterPath    string
	LastCheckpoint string
}
