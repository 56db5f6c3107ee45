package app

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/store"
)

func init() {
	register(command{name: "generate", summary: "generate text from a prompt with a model folder", run: generate})
	register(command{name: "chat", summary: "chat with a model in the terminal", run: chatCmd, ownSignals: true})
}

// genFlags are the flags generate and chat share, named like mlx-lm's.
type genFlags struct {
	model, adapter, system        string
	maxTokens, topK, seed, repWin int
	temp, topP, minP, repPenalty  float64
	raw, stats                    bool
	ws                            wsFlags
}

func addGenFlags(fs *flag.FlagSet) *genFlags {
	g := &genFlags{}
	fs.StringVar(&g.model, "model", "", "model: demo, a folder (Hugging Face layout), a pulled ORG/NAME or a remembered name")
	fs.StringVar(&g.adapter, "adapter", "", "LoRA adapter folder (mlx-lm layout: adapter_config.json, adapters.safetensors)")
	g.ws = addWorkspaceFlags(fs)
	fs.StringVar(&g.system, "system", "", "system prompt")
	fs.IntVar(&g.maxTokens, "max-tokens", 256, "most tokens to generate")
	fs.Float64Var(&g.temp, "temp", 0.7, "sampling temperature; 0 is greedy")
	fs.Float64Var(&g.topP, "top-p", 0.95, "nucleus sampling mass; 1 is off")
	fs.IntVar(&g.topK, "top-k", 0, "keep the k most likely tokens; 0 is off")
	fs.Float64Var(&g.minP, "min-p", 0, "drop tokens below min-p × the most likely; 0 is off")
	fs.Float64Var(&g.repPenalty, "repetition-penalty", 1, "penalty for tokens already in the context; 1 is off")
	fs.IntVar(&g.repWin, "repetition-context-size", 64, "how many recent tokens the penalty looks at")
	fs.IntVar(&g.seed, "seed", 0, "random seed")
	fs.BoolVar(&g.raw, "raw", false, "send the prompt as is, without the model's chat template")
	fs.BoolVar(&g.stats, "stats", true, "print speed and memory after each reply (to stderr)")
	return g
}

// runner holds a loaded model with its tokenizer and template.
type runner struct {
	model *inference.Model
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	stops []int    // stop token ids: config, tokenizer and template EOS together
	words []string // stop strings from the template
	opts  inference.GenerateOptions
}

func loadRunner(ctx context.Context, w *Workspace, g *genFlags, stderr io.Writer) (*runner, error) {
	if g.model == "" {
		return nil, errors.New("--model is required")
	}
	m, info, err := w.LoadModel(ctx, g.model)
	if err != nil {
		return nil, err
	}
	g.model = info.Path
	for _, w := range m.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if g.adapter != "" {
		if _, err := inference.LoadAdapter(m, g.adapter); err != nil {
			return nil, err
		}
	}
	tok, err := tokenizer.Load(g.model)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.LoadTemplate(g.model)
	if err != nil {
		return nil, err
	}
	if tmpl.Fallback() && !g.raw {
		fmt.Fprintln(stderr, "warning: the model has no chat template; using ChatML")
	}
	r := &runner{model: m, tok: tok, tmpl: tmpl, words: tmpl.StopStrings()}
	cfg := m.Config()
	for _, id := range slices.Concat(cfg.StopTokens(), tok.EOS(), tmpl.EOSTokens()) {
		if !slices.Contains(r.stops, id) {
			r.stops = append(r.stops, id)
		}
	}
	r.opts = inference.GenerateOptions{MaxTokens: g.maxTokens, StopTokens: r.stops, Sampling: inference.SampleOptions{
		Temperature: g.temp, TopK: g.topK, TopP: g.topP, MinP: g.minP,
		RepetitionPenalty: g.repPenalty, RepetitionWindow: g.repWin, Seed: uint64(g.seed),
	}}
	return r, r.opts.Sampling.Validate()
}

// prompt renders a conversation (or takes the text as is) and tokenizes it.
func (r *runner) prompt(msgs []chat.Message, raw bool) ([]int, error) {
	if raw {
		return r.tok.Encode(msgs[len(msgs)-1].Content, true)
	}
	text, err := r.tmpl.Render(msgs, chat.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		return nil, err
	}
	// The template writes BOS itself where the model wants one.
	return r.tok.Encode(text, false)
}

// reply generates into w, stopping at stop tokens or stop strings, and returns the
// text and the stats. Text that might begin a stop string is held back until it
// cannot, so a stop string is never printed.
func (r *runner) reply(ctx context.Context, sess *inference.Session, ids []int, w io.Writer) (string, inference.Stats, error) {
	dec := r.tok.NewDecoder(true)
	var out, pending strings.Builder
	hold := 0
	for _, s := range r.words {
		hold = max(hold, len(s)-1)
	}
	flush := func(final bool) bool {
		text := pending.String()
		for _, s := range r.words {
			if i := strings.Index(text, s); s != "" && i >= 0 {
				io.WriteString(w, text[:i])
				out.WriteString(text[:i])
				pending.Reset()
				return true
			}
		}
		keep := 0
		if !final {
			keep = min(hold, len(text))
			for keep > 0 && !isBoundary(text, len(text)-keep) {
				keep--
			}
		}
		io.WriteString(w, text[:len(text)-keep])
		out.WriteString(text[:len(text)-keep])
		pending.Reset()
		pending.WriteString(text[len(text)-keep:])
		return false
	}
	stopped := false
	st, err := inference.Generate(ctx, sess, ids, r.opts, func(tok int) bool {
		pending.WriteString(dec.Add(tok))
		stopped = flush(false)
		return stopped
	})
	if !stopped {
		pending.WriteString(dec.Flush())
		flush(true)
	}
	return out.String(), st, err
}

func isBoundary(s string, i int) bool { return i == 0 || i == len(s) || s[i]&0xC0 != 0x80 }

func printStats(w io.Writer, st inference.Stats) {
	fmt.Fprintf(w, "\n[%d prompt tokens (%d reused), %d generated, first token %d ms, prefill %.1f tok/s, decode %.1f tok/s, KV cache %.1f MiB, peak %.0f MiB, %s]\n",
		st.PromptTokens, st.ReusedTokens, st.GeneratedTokens, st.TimeToFirstToken.Milliseconds(), st.PrefillTPS, st.DecodeTPS,
		float64(st.KVBytes)/(1<<20), float64(st.PeakMemory)/(1<<20), st.StopReason)
}

func generate(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("generate", stderr)
	g := addGenFlags(fs)
	text := fs.String("prompt", "", "the prompt; - reads it from standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *text == "-" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return err
		}
		*text = string(b)
	}
	if *text == "" {
		return errors.New("--prompt is required")
	}
	w, err := g.ws.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	r, err := loadRunner(e.ctx, w, g, stderr)
	if err != nil {
		return err
	}
	var msgs []chat.Message
	if g.system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: g.system})
	}
	ids, err := r.prompt(append(msgs, chat.Message{Role: "user", Content: *text}), g.raw)
	if err != nil {
		return err
	}
	_, st, err := r.reply(e.ctx, inference.NewSession(r.model), ids, stdout)
	fmt.Fprintln(stdout)
	if g.stats {
		printStats(stderr, st)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func chatCmd(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("chat", stderr)
	g := addGenFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := g.ws.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	modelName := g.model
	r, err := loadRunner(e.ctx, w, g, stderr)
	if err != nil {
		return err
	}
	chatID, err := w.Store.CreateChat(e.ctx, store.Chat{Title: "terminal chat", Model: modelName})
	if err != nil {
		return err
	}
	sess := inference.NewSession(r.model)
	var msgs []chat.Message
	if g.system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: g.system})
	}
	start := len(msgs)
	fmt.Fprintln(stdout, "Chatting with", g.model, "— /reset clears the conversation, /exit or Ctrl-D quits, Ctrl-C stops a reply.")
	in := bufio.NewScanner(e.stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for {
		fmt.Fprint(stdout, "\n> ")
		if !in.Scan() {
			fmt.Fprintln(stdout)
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		switch line {
		case "":
			continue
		case "/exit", "/quit":
			return nil
		case "/reset":
			msgs = msgs[:start]
			sess.Reset()
			fmt.Fprintln(stdout, "(conversation cleared)")
			continue
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: line})
		ids, err := r.prompt(msgs, g.raw)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(e.ctx, os.Interrupt) // Ctrl-C stops this reply only
		text, st, err := r.reply(ctx, sess, ids, stdout)
		stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: text})
		if err := w.saveTurn(e.ctx, chatID, line, text, st); err != nil {
			return err
		}
		if g.stats {
			printStats(stderr, st)
		}
	}
}
