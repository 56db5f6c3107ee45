package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/internal/termsafe"
	"github.com/inloop/inloop/training/trainer"
)

func init() {
	register(command{name: "train", summary: "fine-tune a model with LoRA (QLoRA on a quantized model) on a JSONL file or a folder of documents", run: trainCmd})
	register(command{name: "fuse", summary: "fold a LoRA adapter into its model and write the result as a model folder", run: fuseCmd})
}

func fuseCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("fuse", stderr)
	model := fs.String("model", "", "base model: demo, a folder, a pulled ORG/NAME or a remembered name")
	adapter := fs.String("adapter-path", "", "adapter folder (mlx-lm layout); default: the model's newest adapter")
	save := fs.String("save-path", "fused_model", "folder to write the fused model to")
	dequantize := fs.Bool("dequantize", false, "write a quantized model dense (in its scales' dtype), as mlx-lm's fuse --dequantize does")
	kernel := fs.String("kernel", "gpu", "whose rounding re-quantizes the fused layers of a quantized model: gpu = MLX's Metal/CUDA kernel, what mlx-lm's fuse writes on a Mac (the default); cpu = MLX's CPU kernel, what it writes on Linux")
	dtype := fs.String("dtype", "auto", "type of the written weights: auto keeps the base's (a bfloat16 model stays bfloat16, as mlx-lm writes it); float32, bfloat16 or float16 converts every float tensor and says so in config.json")
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" {
		return errors.New("--model is required")
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := inference.ParseDType(*dtype); err != nil {
		return fmt.Errorf("--dtype %q: want %s", *dtype, inference.DTypeNames)
	}
	fused, err := w.Fuse(e.ctx, FuseSpec{Model: *model, Adapter: *adapter, Out: *save, Dequantize: *dequantize, DType: *dtype, Kernel: *kernel})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Fused %d adapted layers; model written to %s\n", fused.Layers, fused.Path)
	return nil
}

func trainCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("train", stderr)
	var c trainer.Config
	var keys, fineTune string
	var seed int64
	fs.StringVar(&c.Model, "model", "", "model: demo, a folder, a pulled ORG/NAME or a remembered name (a quantized one trains QLoRA)")
	fs.StringVar(&c.Data, "data", "", "a JSONL file, a folder with train.jsonl/valid.jsonl/test.jsonl, or a folder of documents")
	fs.StringVar(&c.AdapterPath, "adapter-path", "", "folder for the adapter (mlx-lm layout) and its checkpoints (default: adapters/MODEL-TIME under the data directory)")
	wf := addWorkspaceFlags(fs)
	fs.StringVar(&c.DType, "dtype", "float32", "type to load the base model and compute in: "+inference.DTypeNames+"; the adapters stay float32")
	fs.StringVar(&fineTune, "fine-tune-type", "lora", "only lora (QLoRA is lora on a quantized model)")
	fs.IntVar(&c.Iters, "iters", trainer.DefaultIters, "optimizer updates")
	fs.IntVar(&c.Epochs, "epochs", 0, "passes over the training set; when set it replaces --iters")
	fs.IntVar(&c.BatchSize, "batch-size", trainer.DefaultBatchSize, "rows per batch")
	fs.IntVar(&c.GradAccumulation, "grad-accumulation-steps", trainer.DefaultGradAccumulation, "batches per update")
	fs.Float64Var(&c.LearningRate, "learning-rate", trainer.DefaultLearningRate, "peak learning rate")
	fs.StringVar(&c.Optimizer, "optimizer", "adam", "adam, adamw or sgd")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0, "decoupled weight decay (adamw's default 0.01 when 0)")
	fs.IntVar(&c.Warmup, "lr-warmup", 0, "linear warmup steps")
	fs.BoolVar(&c.Cosine, "cosine", false, "cosine decay of the learning rate to --min-learning-rate")
	fs.Float64Var(&c.MinLearningRate, "min-learning-rate", 0, "the floor of the cosine decay")
	fs.Float64Var(&c.ClipGradNorm, "clip-grad-norm", 0, "clip gradients to this global norm; 0 is off")
	fs.IntVar(&c.NumLayers, "num-layers", 16, "adapt the last N blocks; -1 for all")
	fs.IntVar(&c.Rank, "rank", 8, "LoRA rank")
	fs.Float64Var(&c.Scale, "scale", 20, "LoRA scale")
	fs.Float64Var(&c.Dropout, "dropout", 0, "LoRA dropout")
	fs.StringVar(&keys, "keys", "", "comma-separated linear layers of a block to adapt (e.g. self_attn.q_proj,self_attn.v_proj); default all")
	fs.IntVar(&c.MaxSeqLength, "max-seq-length", trainer.DefaultMaxSeqLength, "longest sequence; longer ones are cut")
	fs.IntVar(&c.StepsPerReport, "steps-per-report", trainer.DefaultStepsPerReport, "updates between progress lines")
	fs.IntVar(&c.StepsPerEval, "steps-per-eval", trainer.DefaultStepsPerEval, "updates between validations; -1 never")
	fs.IntVar(&c.ValBatches, "val-batches", trainer.DefaultValBatches, "validation batches; -1 for all")
	fs.IntVar(&c.TestBatches, "test-batches", trainer.DefaultTestBatches, "test batches; -1 for all")
	fs.IntVar(&c.SaveEvery, "save-every", trainer.DefaultSaveEvery, "updates between checkpoints; -1 only at the end")
	fs.IntVar(&c.KeepCheckpoints, "keep-checkpoints", 0, "checkpoints kept on disk; 0 keeps all")
	fs.IntVar(&c.ChunkSize, "chunk-size", 0, "tokens per chunk of a documents folder (default 512)")
	fs.Int64Var(&seed, "seed", 0, "random seed")
	fs.BoolVar(&c.Resume, "resume", false, "continue from the newest good checkpoint in --adapter-path")
	fs.BoolVar(&c.GradCheckpoint, "grad-checkpoint", false, "recompute each block in the backward pass: far less memory, about a third more time (on by itself when memory is short)")
	fs.BoolVar(&c.Force, "force", false, "train even when the memory estimate is more than this machine has available")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Model == "" || c.Data == "" {
		return errors.New("--model and --data are required")
	}
	if _, err := inference.ParseDType(c.DType); err != nil {
		return fmt.Errorf("--dtype %q: want %s", c.DType, inference.DTypeNames)
	}
	if fineTune != "lora" {
		return fmt.Errorf("--fine-tune-type %q: only lora is supported", fineTune)
	}
	if keys != "" {
		for k := range strings.SplitSeq(keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				c.Keys = append(c.Keys, k)
			}
		}
	}
	c.Seed = uint64(seed)

	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	job, err := w.StartTrain(e.ctx, TrainSpec{Config: c})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Run %d: training %s\n", job.RunID, c.Model)
	for p := range job.Events {
		printProgress(stdout, stderr, p)
	}
	if err := job.Wait(); err != nil {
		if e.ctx.Err() != nil {
			return fmt.Errorf("%w\nContinue with: inloop runs resume %d", err, job.RunID)
		}
		if errors.Is(err, trainer.ErrWontFit) {
			return fmt.Errorf("%w\nLower --batch-size, --max-seq-length, --rank or --num-layers, train a quantized model, or pass --force to run anyway", err)
		}
		return err
	}
	var res struct {
		Steps   int     `json:"steps"`
		Seconds float64 `json:"seconds"`
		Adapter string  `json:"adapter"`
	}
	_ = json.Unmarshal(job.Result(), &res)
	fmt.Fprintf(stdout, "Trained %d steps in %s; adapter saved to %s\n", res.Steps, (time.Duration(res.Seconds * float64(time.Second))).Round(time.Millisecond), res.Adapter)
	return nil
}

// printProgress writes one progress line, in mlx-lm's wording where it has one.
func printProgress(stdout, stderr io.Writer, p Progress) {
	switch p.Phase {
	case PhaseInfo:
		fmt.Fprintln(stdout, termsafe.String(p.Message))
	case PhaseWarning:
		fmt.Fprintln(stderr, "warning:", termsafe.String(p.Message))
	case PhaseTrain:
		line := fmt.Sprintf("Iter %d: Train loss %.3f, Learning Rate %.3e, Tokens/sec %.1f, Trained Tokens %d", p.Step, p.Loss, p.LR, p.TokensPerSec, p.Tokens)
		if p.PeakMemory > 0 {
			line += fmt.Sprintf(", Peak mem %.3f GB", float64(p.PeakMemory)/1e9)
		}
		if p.Step < p.Steps {
			line += ", ETA " + p.ETA.Round(time.Second).String()
		}
		fmt.Fprintln(stdout, line)
	case PhaseVal:
		fmt.Fprintf(stdout, "Iter %d: Val loss %.3f\n", p.Step, p.ValLoss)
	case PhaseCheckpoint:
		fmt.Fprintf(stdout, "Iter %d: Saved checkpoint to %s\n", p.Step, p.Path)
	case PhaseTest:
		fmt.Fprintf(stdout, "Test loss %.3f, Test ppl %.3f.\n", p.TestLoss, math.Exp(p.TestLoss))
	case PhaseDownload:
		fmt.Fprintf(stdout, "\r%-48s %8.1f / %.1f MB", termsafe.String(p.File), float64(p.Done)/1e6, float64(p.Total)/1e6)
		if p.Done == p.Total {
			fmt.Fprintln(stdout)
		}
	}
}
