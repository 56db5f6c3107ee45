package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
)

func init() {
	register(command{name: "quantize", summary: "write an mlx-lm compatible 4/8-bit copy of a model, with size and perplexity before and after", run: quantizeCmd})
}

// sampleText is the default perplexity probe when --text is not given: plain
// English prose, so the before/after comparison means something for any model.
const sampleText = `It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the other way.`

func quantizeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quantize", stderr)
	src := fs.String("model", "", "model folder to quantize")
	out := fs.String("out", "", "folder to write (must not exist)")
	bits := fs.Int("bits", 4, "bits per weight: 2, 3, 4, 5, 6 or 8")
	group := fs.Int("group-size", 64, "weights per scale and bias: 32, 64 or 128")
	textFile := fs.String("text", "", "text file for the perplexity check (default: a built-in English paragraph)")
	window := fs.Int("window", 512, "perplexity context window in tokens")
	backend := fs.String("backend", "auto", "compute backend for the perplexity check: auto, cpu or mlx")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *src == "" || *out == "" {
		return errors.New("--model and --out are required")
	}
	text := sampleText
	if *textFile != "" {
		b, err := os.ReadFile(*textFile)
		if err != nil {
			return err
		}
		text = string(b)
	}
	b, err := openBackend(*backend)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(*src)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return err
	}
	before, err := perplexityOf(*src, b, ids, *window)
	if err != nil {
		return fmt.Errorf("perplexity before: %w", err)
	}
	rep, err := inference.QuantizeModel(*src, *out, *bits, *group)
	if err != nil {
		return err
	}
	after, err := perplexityOf(*out, b, ids, *window)
	if err != nil {
		return fmt.Errorf("perplexity after: %w", err)
	}
	fmt.Fprintf(stdout, "quantized %d modules to %d-bit (group %d), left %d dense, in %s\n",
		len(rep.Quantized), rep.Bits, rep.GroupSize, len(rep.Skipped), rep.Duration.Round(time.Millisecond))
	fmt.Fprintf(stdout, "size:       %8.1f MB -> %8.1f MB (%.2fx smaller)\n",
		float64(rep.BytesBefore)/1e6, float64(rep.BytesAfter)/1e6, float64(rep.BytesBefore)/float64(max(rep.BytesAfter, 1)))
	fmt.Fprintf(stdout, "perplexity: %8.3f    -> %8.3f    (%+.2f%%, %d tokens)\n", before, after, 100*(after/before-1), len(ids))
	fmt.Fprintf(stdout, "written to %s\n", *out)
	return nil
}

func perplexityOf(dir string, b mx.Backend, ids []int, window int) (float64, error) {
	m, err := inference.Load(dir, b)
	if err != nil {
		return 0, err
	}
	return inference.Perplexity(m, ids, window)
}
