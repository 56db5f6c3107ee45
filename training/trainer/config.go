package trainer

import (
	"errors"
	"fmt"
	"math"
	"time"

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
	DefaultAdapterPath      = "adapters"
)

// Config is one training run. Zero fields take the defaults above (and
// lora's for the adapter shape).
type Config struct {
	Model   string // model folder (Hugging Face or mlx-community layout; a quantized one gives QLoRA)
	Data    string // a JSONL file, an mlx-lm data folder (train/valid/test.jsonl) or a folder of documents
	Backend string // "auto", "cpu" or "mlx"

	// AdapterPath is the run directory: the final adapter in mlx-lm's layout
	// and checkpoints/ for resuming.
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
}

func (c Config) withDefaults() Config {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Iters, DefaultIters)
	def(&c.BatchSize, DefaultBatchSize)
	def(&c.GradAccumulation, DefaultGradAccumulation)
	def(&c.StepsPerReport, DefaultStepsPerReport)
	def(&c.StepsPerEval, DefaultStepsPerEval)
	def(&c.ValBatches, DefaultValBatches)
	def(&c.TestBatches, DefaultTestBatches)
	def(&c.SaveEvery, DefaultSaveEvery)
	def(&c.MaxSeqLength, DefaultMaxSeqLength)
	if c.LearningRate == 0 {
		c.LearningRate = DefaultLearningRate
	}
	if c.AdapterPath == "" {
		c.AdapterPath = DefaultAdapterPath
	}
	if c.Optimizer == "" {
		c.Optimizer = "adam"
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
	case c.Iters < 1, c.BatchSize < 1, c.GradAccumulation < 1, c.MaxSeqLength < 2, c.StepsPerReport < 1:
		return fmt.Errorf("trainer: iters %d, batch size %d, grad accumulation %d, max seq length %d and steps per report %d must be positive",
			c.Iters, c.BatchSize, c.GradAccumulation, c.MaxSeqLength, c.StepsPerReport)
	case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
		return fmt.Errorf("trainer: learning rate %g", c.LearningRate)
	case c.Warmup < 0 || c.Warmup >= c.Iters && c.Warmup > 0:
		return fmt.Errorf("trainer: warmup %d must be below iters %d", c.Warmup, c.Iters)
	case c.ClipGradNorm < 0:
		return fmt.Errorf("trainer: clip grad norm %g", c.ClipGradNorm)
	case c.Epochs < 0:
		return fmt.Errorf("trainer: epochs %d", c.Epochs)
	case c.KeepCheckpoints < 0:
		return fmt.Errorf("trainer: keep checkpoints %d", c.KeepCheckpoints)
	}
	switch c.Optimizer {
	case "adam", "adamw", "sgd":
	default:
		return fmt.Errorf("trainer: optimizer %q (adam, adamw or sgd)", c.Optimizer)
	}
	return nil
}

func (c Config) schedule() optim.Schedule {
	if c.Schedule != nil {
		return c.Schedule
	}
	lr := float32(c.LearningRate)
	if c.Cosine || c.Warmup > 0 {
		decay := c.Iters - c.Warmup
		if !c.Cosine {
			decay = 0 // warmup, then flat
		}
		return optim.WarmupCosine(lr, c.Warmup, decay, float32(c.MinLearningRate))
	}
	return optim.Constant(lr)
}

func (c Config) optimizer() optim.Optimizer {
	s := c.schedule()
	switch c.Optimizer {
	case "adamw":
		o := optim.NewAdamW(s)
		if c.WeightDecay != 0 {
			o.WeightDecay = c.WeightDecay
		}
		return o
	case "sgd":
		o := optim.NewSGD(s)
		o.WeightDecay = c.WeightDecay
		return o
	}
	o := optim.NewAdam(s)
	o.WeightDecay = c.WeightDecay
	return o
}

// EventKind says what an Event reports.
type EventKind int

const (
	EventInfo       EventKind = iota // Message: what the run is doing (data loaded, resumed, …)
	EventWarning                     // Message: something the user should know (memory, bad rows)
	EventTrain                       // Loss (mean since the last report), LR, TokensPerSec, ETA, PeakMemory
	EventVal                         // ValLoss
	EventCheckpoint                  // Path
	EventTest                        // TestLoss, TestPerplexity
	EventDone                        // Path: the final adapter
)

func (k EventKind) String() string {
	return [...]string{"info", "warning", "train", "val", "checkpoint", "test", "done"}[k]
}

// Event is one progress report of a run.
type Event struct {
	Kind           EventKind
	Step, Iters    int
	Loss           float64
	ValLoss        float64
	TestLoss       float64
	TestPerplexity float64
	LR             float64
	TokensPerSec   float64
	Tokens         int64 // trained tokens so far (this process)
	ETA            time.Duration
	PeakMemory     int64 // bytes, where the backend reports it
	Path           string
	Message        string
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
