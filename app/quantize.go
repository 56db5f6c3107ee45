package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
)

func init() {
	register(command{name: "quantize", summary: "write an mlx-lm compatible 4/8-bit copy of a model, with size and perplexity before and after", run: quantizeCmd})
}

// sampleText is the default perplexity probe when --text is not given: plain
// English prose, so the before/after comparison means something for any model.
const sampleText = `It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the other way.`

func quantizeCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("quantize", stderr)
	src := fs.String("model", "", "model to quantize: demo, a folder, a pulled ORG/NAME or a remembered name")
	out := fs.String("out", "", "folder to write (must not exist; default models/NAME-BITSbit under the data directory)")
	bits := fs.Int("bits", 4, "bits per weight: 2, 3, 4, 5, 6 or 8")
	group := fs.Int("group-size", 64, "weights per scale and bias: 32, 64 or 128")
	kernel := fs.String("kernel", "gpu", "whose rounding to write, bit for bit: gpu = MLX's Metal/CUDA kernel, what mlx_lm.convert writes on a Mac (the default); cpu = MLX's CPU kernel, what mlx_lm.convert writes on Linux without CUDA. They differ only in groups of all-negative weights and exact ties")
	textFile := fs.String("text", "", "text file for the perplexity check (default: a built-in English paragraph)")
	window := fs.Int("window", 512, "perplexity context window in tokens")
	wf := addWorkspaceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *src == "" {
		return errors.New("--model is required")
	}
	if _, err := quant.ParseKernel(*kernel); err != nil {
		return fmt.Errorf("--kernel %q: want gpu or cpu", *kernel)
	}
	spec := QuantizeSpec{Model: *src, Out: *out, Bits: *bits, GroupSize: *group, Window: *window, Kernel: *kernel}
	if *textFile != "" {
		b, err := os.ReadFile(*textFile)
		if err != nil {
			return err
		}
		spec.Text = string(b)
	}
	w, err := wf.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	job, err := w.StartQuantize(e.ctx, spec)
	if err != nil {
		return err
	}
	for p := range job.Events {
		printProgress(stdout, stderr, p)
	}
	if err := job.Wait(); err != nil {
		return err
	}
	var r QuantizeResult
	if err := json.Unmarshal(job.Result(), &r); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "quantized %d modules to %d-bit (group %d, %s kernel rounding), left %d dense, in %s\n",
		r.Quantized, *bits, *group, *kernel, r.Skipped, (time.Duration(r.Seconds * float64(time.Second))).Round(time.Millisecond))
	fmt.Fprintf(stdout, "size:       %8.1f MB -> %8.1f MB (%.2fx smaller)\n",
		float64(r.BytesBefore)/1e6, float64(r.BytesAfter)/1e6, float64(r.BytesBefore)/float64(max(r.BytesAfter, 1)))
	fmt.Fprintf(stdout, "perplexity: %8.3f    -> %8.3f    (%+.2f%%, %d tokens)\n", r.PerplexityBefore, r.PerplexityAfter, 100*(r.PerplexityAfter/r.PerplexityBefore-1), r.Tokens)
	fmt.Fprintf(stdout, "written to %s\n", r.Out)
	return nil
}

func perplexityOf(dir string, b mx.Backend, ids []int, window int) (float64, error) {
	m, err := inference.Load(dir, b)
	if err != nil {
		return 0, err
	}
	return inference.Perplexity(m, ids, window)
}
