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
	"strings"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/internal/termsafe"
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
	kv                            inference.CacheOptions
	ws                            wsFlags
}

func addGenFlags(fs *flag.FlagSet) *genFlags {
	g := &genFlags{}
	fs.StringVar(&g.model, "model", "", "model: demo, a folder (Hugging Face layout), a pulled ORG/NAME or a remembered name")
	fs.StringVar(&g.adapter, "adapter", "", "LoRA adapter folder (mlx-lm layout: adapter_config.json, adapters.safetensors)")
	g.ws = addWorkspaceFlags(fs)
	g.ws.addDTypeFlag(fs)
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
	fs.IntVar(&g.kv.Bits, "kv-bits", 0, "keep the KV cache quantized to this many bits past the most recent positions (8 or 4; MLX's formats take 2, 3, 4, 5, 6 or 8), or in bfloat16 with 16; 0 keeps it in the model's type")
	fs.IntVar(&g.kv.GroupSize, "kv-group-size", 64, "values per scale and bias of a quantized KV cache")
	fs.BoolVar(&g.stats, "stats", true, "print speed and memory after each reply (to stderr)")
	return g
}

// check refuses flags a reply cannot take (the KV cache's, the sampling's, a
// negative --max-tokens) before a model loads.
func (g *genFlags) check() error {
	if err := g.kv.Validate(); err != nil {
		return fmt.Errorf("--kv-bits %d, --kv-group-size %d: %w", g.kv.Bits, g.kv.GroupSize, err)
	}
	if g.maxTokens < 0 {
		return fmt.Errorf("--max-tokens %d, want ≥ 0 (0: until a stop token or the context is full)", g.maxTokens)
	}
	return g.sampling().Validate()
}

// sampling is the flags' sampling settings.
func (g *genFlags) sampling() inference.SampleOptions {
	return inference.SampleOptions{Temperature: g.temp, TopK: g.topK, TopP: g.topP, MinP: g.minP,
		RepetitionPenalty: g.repPenalty, RepetitionWindow: g.repWin, Seed: uint64(g.seed)}
}

// runner is a loaded model's replier with the command's sampling settings.
type runner struct {
	model *inference.Model
	rep   *inference.Replier
	opts  inference.ReplyOptions
	raw   bool
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
		fmt.Fprintln(stderr, "warning:", termsafe.String(w))
	}
	if g.adapter != "" {
		if _, err := inference.LoadAdapter(m, g.adapter); err != nil {
			return nil, err
		}
	}
	rep, err := inference.LoadReplier(m, g.model)
	if err != nil {
		return nil, err
	}
	if rep.Template != nil && rep.Template.Fallback() && !g.raw {
		fmt.Fprintln(stderr, "warning: the model has no chat template; using ChatML")
	}
	r := &runner{model: m, rep: rep, raw: g.raw, opts: inference.ReplyOptions{MaxTokens: g.maxTokens, AddSpecialTokens: g.raw, Sampling: g.sampling()}}
	return r, nil
}

// reply answers the conversation (or, raw, continues its last message's text)
// into w and returns the text and the stats.
func (r *runner) reply(ctx context.Context, sess *inference.Session, msgs []chat.Message, w io.Writer) (string, inference.Stats, error) {
	onText := func(s string) { io.WriteString(w, termsafe.String(s)) } // a reply can hold escape sequences
	if r.raw {
		return r.rep.ReplyText(ctx, sess, msgs[len(msgs)-1].Content, r.opts, onText)
	}
	return r.rep.Reply(ctx, sess, msgs, r.opts, onText)
}

func printStats(w io.Writer, st inference.Stats) { fmt.Fprintf(w, "\n%s\n", st) }

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
	if err := g.check(); err != nil {
		return err
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
	sess, err := inference.NewSessionWith(r.model, g.kv)
	if err != nil {
		return err
	}
	_, st, err := r.reply(e.ctx, sess, append(msgs, chat.Message{Role: "user", Content: *text}), stdout)
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
	mem := addMemoryFlags(fs) // deltamem_cmd.go
	if err := fs.Parse(args); err != nil {
		return err
	}
	if g.model == "" {
		return errors.New("--model is required")
	}
	if err := g.check(); err != nil {
		return err
	}
	w, err := g.ws.open(e.ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	c, err := w.StartChat(e.ctx, ChatSpec{Model: g.model, Adapter: g.adapter, System: g.system, MaxTokens: g.maxTokens, Raw: g.raw, KV: g.kv,
		Sampling: g.sampling(), Memory: mem.spec()})
	if err != nil {
		return err
	}
	for _, warn := range c.Model().Warnings() {
		fmt.Fprintln(stderr, "warning:", termsafe.String(warn))
	}
	fmt.Fprintln(stdout, "Chatting with", c.Info.Name, "— /reset clears the conversation, /exit or Ctrl-D quits, Ctrl-C stops a reply.")
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
			c.Reset()
			fmt.Fprintln(stdout, "(conversation cleared)")
			continue
		}
		ctx, stop := signal.NotifyContext(e.ctx, os.Interrupt) // Ctrl-C stops this reply only
		turn, err := c.Send(ctx, line, func(s string) { io.WriteString(stdout, s) })
		stop()
		switch {
		case errors.Is(err, ErrChatFull) || errors.Is(err, inference.ErrContextFull):
			fmt.Fprintf(stderr, "(%s; the conversation goes on)\n", termsafe.String(UserMessage(err)))
			continue
		case err != nil && !errors.Is(err, context.Canceled):
			return err
		}
		if turn.Notice != "" {
			fmt.Fprintf(stderr, "\n(%s)", termsafe.String(turn.Notice))
		}
		if turn.Stats.StopReason == inference.StopContext {
			fmt.Fprint(stderr, "\n(the reply reached the end of the model's context)")
		}
		if g.stats {
			printStats(stderr, turn.Stats)
		}
	}
}
