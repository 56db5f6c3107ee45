package app

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/inloop/inloop/internal/atomicfile"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/training/bpe"
	"github.com/inloop/inloop/training/pretrain"
	"github.com/inloop/inloop/training/trainer"
)

func init() {
	register(command{name: "build-demo", summary: "pretrain the bundled demo model from scratch on public-domain English", run: buildDemoCmd})
}

// DemoModelName is the name `--model` accepts for the bundled demo model.
const DemoModelName = "demo"

// demoCorpusFiles are the Debian package files the demo model is trained on
// (see resources/demo/SOURCES.md for their licenses).
var demoCorpusFiles = []struct{ path, kind string }{
	{"/usr/share/doc/jargon-text/jargon.txt.gz", "paragraphs"}, // jargon-text: public domain
	{"/usr/share/games/fortunes/fortunes", "fortunes"},         // fortunes-min: BSD
	{"/usr/share/games/fortunes/literature", "fortunes"},
	{"/usr/share/games/fortunes/riddles", "fortunes"},
}

// demoModelConfig is the demo model's architecture: Llama, 4 layers of 192
// with 4 query and 2 key/value heads, tied embeddings.
func demoModelConfig(vocab, eos int) inference.Config {
	return inference.Config{
		ModelType:             "llama",
		Architectures:         []string{"LlamaForCausalLM"},
		HiddenSize:            192,
		IntermediateSize:      512,
		NumHiddenLayers:       4,
		NumAttentionHeads:     4,
		NumKeyValueHeads:      2,
		RMSNormEps:            1e-5,
		RopeTheta:             10000,
		TieWordEmbeddings:     true,
		VocabSize:             vocab,
		MaxPositionEmbeddings: 512,
		HiddenAct:             "silu",
		EOSTokenID:            inference.TokenIDs{eos},
	}
}

// demoDefaults are the committed model's settings.
const (
	demoVocab   = 4096
	demoSteps   = 2200
	demoBatch   = 16
	demoSeqLen  = 128
	demoSeed    = 1
	demoPeakLR  = 3e-3
	demoWarmup  = 30
	demoClip    = 1.0
	demoMinWord = 3 // a word is in words.txt when the corpus has it this often
)

func buildDemoCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("build-demo", stderr)
	out := fs.String("out", "resources/demo", "folder to write the model into")
	steps := fs.Int("steps", demoSteps, "optimizer updates")
	corpus := fs.String("corpus", "", "folder of .txt/.txt.gz files to train on instead of the Debian packages jargon-text and fortunes-min")
	backend := fs.String("backend", "auto", "compute backend: auto, cpu or mlx")
	seed := fs.Uint64("seed", demoSeed, "random seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := openBackend(*backend)
	if err != nil {
		return err
	}
	began := time.Now()
	docs, err := readDemoCorpus(*corpus)
	if err != nil {
		return err
	}
	var nbytes int
	for _, d := range docs {
		nbytes += len(d)
	}
	fmt.Fprintf(stdout, "corpus: %d documents, %.2f MB\n", len(docs), float64(nbytes)/1e6)

	specials := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	tr, err := bpe.TrainStrings(docs, bpe.Options{VocabSize: demoVocab, SpecialTokens: specials, EOSToken: "<|endoftext|>", ModelMaxLength: 512})
	if err != nil {
		return err
	}
	eos, _ := tr.SpecialID("<|endoftext|>")
	fmt.Fprintf(stdout, "tokenizer: %d tokens (%d merges) in %s\n", len(tr.Vocab), tr.Stats.Merges, (tr.Stats.CountTime + tr.Stats.MergeTime).Round(time.Millisecond))
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := tr.WriteFiles(*out, bpe.ChatMLTemplate); err != nil {
		return err
	}
	tok, err := tokenizer.Load(*out)
	if err != nil {
		return err
	}
	var stream []int
	for _, d := range docs {
		ids, err := tok.Encode(d, false)
		if err != nil {
			return err
		}
		stream = append(stream, ids...)
		stream = append(stream, eos)
	}
	fmt.Fprintf(stdout, "stream: %d tokens (%.2f bytes per token)\n", len(stream), float64(nbytes)/float64(len(stream)))

	cfg := pretrain.Config{
		Model: demoModelConfig(len(tr.Vocab), eos), Steps: *steps, BatchSize: demoBatch, SeqLen: demoSeqLen,
		LR: demoPeakLR, MinLR: demoPeakLR / 10, Warmup: min(demoWarmup, *steps/10), ClipNorm: demoClip, Seed: *seed,
	}
	report := max(1, *steps/30)
	var window float64
	var n int
	m, res, err := pretrain.Run(e.ctx, b, cfg, stream, func(p trainer.Event) {
		if p.Kind != trainer.EventTrain {
			return
		}
		window += p.Loss
		n++
		if p.Step%report == 0 || p.Step == p.Iters || p.Step == 1 {
			fmt.Fprintf(stdout, "step %d/%d: loss %.3f, lr %.2e, %.0f tok/s, elapsed %s, ETA %s\n", p.Step, p.Iters, window/float64(n),
				p.LR, p.TokensPerSec, p.Elapsed.Round(time.Second), p.ETA.Round(time.Second))
			window, n = 0, 0
		}
	})
	if err != nil {
		return err
	}
	if err := pretrain.Save(m, *out, mx.BFloat16); err != nil {
		return err
	}
	if err := writeWordList(filepath.Join(*out, "words.txt"), docs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "trained %d parameters for %d steps (%d tokens) in %s at %.0f tok/s: loss %.3f → %.3f\n",
		res.Params, res.Steps, res.Tokens, res.Duration.Round(time.Second), res.TokPerSec, res.FirstLoss, res.FinalLoss)
	fmt.Fprintf(stdout, "model written to %s (everything took %s)\n", *out, time.Since(began).Round(time.Second))
	for _, p := range demoSamplePrompts {
		text, err := greedyText(m, tok, p, 40, false)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "greedy: %q → %q\n", p, text)
	}
	return nil
}

// readDemoCorpus returns the training documents: paragraphs of the Jargon File
// and fortune cookies, or, with dir, paragraphs of every .txt/.txt.gz file in it.
func readDemoCorpus(dir string) ([]string, error) {
	type src struct{ path, kind string }
	var files []src
	if dir != "" {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".txt") || strings.HasSuffix(n, ".txt.gz")) {
				files = append(files, src{filepath.Join(dir, n), "paragraphs"})
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("build-demo: no .txt or .txt.gz files in %s", dir)
		}
	} else {
		for _, f := range demoCorpusFiles {
			files = append(files, src{f.path, f.kind})
		}
	}
	var docs []string
	for _, f := range files {
		raw, err := readMaybeGzip(f.path)
		if errors.Is(err, os.ErrNotExist) && dir == "" {
			return nil, fmt.Errorf("build-demo: %s is missing: install the corpus with `apt-get install jargon-text fortunes-min`, or pass --corpus", f.path)
		} else if err != nil {
			return nil, err
		}
		if f.kind == "fortunes" {
			docs = append(docs, splitFortunes(raw)...)
		} else {
			docs = append(docs, proseParagraphs(raw)...)
		}
	}
	return docs, nil
}

func readMaybeGzip(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	return string(raw), nil
}

// proseParagraphs reflows text into paragraphs of running prose, one line each,
// dropping headings, tables of contents and rules (paragraphs of fewer than
// eight words or with box-drawing characters).
func proseParagraphs(text string) []string {
	var out []string
	for p := range strings.SplitSeq(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		words := strings.Fields(p)
		if len(words) < 8 || strings.ContainsAny(p, "═─│┌┐└┘") {
			continue
		}
		out = append(out, strings.Join(words, " "))
	}
	return out
}

// splitFortunes cuts a fortune file at its "%" lines, keeping each cookie's
// line breaks but not its tabs.
func splitFortunes(text string) []string {
	var out []string
	for c := range strings.SplitSeq(text, "\n%\n") {
		c = strings.TrimSpace(strings.ReplaceAll(c, "\t", " "))
		if c != "" && c != "%" {
			out = append(out, c)
		}
	}
	return out
}

// corpusWords splits text into lower-case words of letters (with inner
// apostrophes and hyphens), the unit the demo's word list counts.
func corpusWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && r != '\'' && r != '-'
	})
}

func normWord(w string) string { return strings.Trim(w, "'-") }

// writeWordList writes the corpus' words seen at least demoMinWord times, one
// a line, sorted: what a test checks generated text against.
func writeWordList(path string, docs []string) error {
	counts := map[string]int{}
	for _, d := range docs {
		for _, w := range corpusWords(d) {
			if w = normWord(w); w != "" {
				counts[w]++
			}
		}
	}
	var words []string
	for w, c := range counts {
		if c >= demoMinWord {
			words = append(words, w)
		}
	}
	sort.Strings(words)
	return atomicfile.WriteFile(path, []byte(strings.Join(words, "\n")+"\n"), 0o644)
}

// demoWords reads the embedded word list.
func demoWords() (map[string]bool, error) {
	f, err := resources.DemoFS().Open("words.txt")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	set := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		set[sc.Text()] = true
	}
	return set, sc.Err()
}

// demoSamplePrompts are continued greedily after a build.
var demoSamplePrompts = []string{"The ", "A hacker is", "Q: What is"}

// demoModelFiles are the files of the embedded folder that make up the model.
var demoModelFiles = []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}

// demoModelDir returns the demo model's folder under the data directory,
// <data-dir>/models/inloop-demo, writing it from the embedded copy when it is
// missing or differs from the copy in this binary (a stamp of the embedded
// files' hash says which).
func demoModelDir(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "models", "inloop-demo")
	src := resources.DemoFS()
	h := sha256.New()
	for _, name := range demoModelFiles {
		raw, err := fs.ReadFile(src, name)
		if err != nil {
			return "", fmt.Errorf("demo model: this binary has no embedded %s: %w", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(raw))
		h.Write(raw)
	}
	stamp := hex.EncodeToString(h.Sum(nil))
	stampPath := filepath.Join(dir, ".inloop-demo")
	if old, err := os.ReadFile(stampPath); err == nil && string(old) == stamp {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, name := range demoModelFiles {
		raw, _ := fs.ReadFile(src, name)
		if err := atomicfile.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			return "", err
		}
	}
	if err := atomicfile.WriteFile(stampPath, []byte(stamp), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// fractionKnown is the share of text's words found in words.
func fractionKnown(text string, words map[string]bool) (known, total int) {
	for _, w := range corpusWords(text) {
		if w = normWord(w); w == "" {
			continue
		}
		total++
		if words[w] {
			known++
		}
	}
	return
}

// greedyText continues prompt greedily for at most n tokens and returns the
// decoded continuation (without the prompt). With throughEOS it does not stop
// at end-of-text but goes on into the next document (special tokens are not
// printed).
func greedyText(m *inference.Model, tok *tokenizer.Tokenizer, prompt string, n int, throughEOS bool) (string, error) {
	text, _, err := inference.NewReplier(m, tok, nil).ReplyText(context.Background(), nil, prompt,
		inference.ReplyOptions{MaxTokens: n, IgnoreStops: throughEOS, Sampling: inference.SampleOptions{Temperature: 0}}, nil)
	return text, err
}
