// Package app is Inloop's composition root: it opens the compute backend and
// (as they arrive) the data directory, store, model registry and job runner, and it
// runs every job the user can start, from the command line or from the GUI alike.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/internal/termsafe"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu" // registers the "cpu" backend
	_ "github.com/inloop/inloop/mlxbridge/mlx" // registers "mlx" where libmlxc loads
)

// env is what Run hands a command: the context that a signal cancels, and the
// standard streams.
type env struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one headless job.
type command struct {
	name, summary string
	run           func(e *env, args []string) error
	// ownSignals: the command handles Ctrl-C itself (chat stops a reply, not
	// the program); for the others Ctrl-C and SIGTERM cancel the job.
	ownSignals bool
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// Main runs the command line with no input and no cancellation; it returns the
// process exit code. Tests use it; the program uses Run.
func Main(args []string, stdout, stderr io.Writer) int {
	return Run(context.Background(), args, strings.NewReader(""), stdout, stderr)
}

// Run runs the command line: ctx cancels the job (the program cancels it on
// Ctrl-C), stdin feeds chat and prompts. It returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// The window arrives with the ui package; until then the default job checks
		// the machine and lets the embedded demo model speak.
		if code := Run(ctx, []string{"doctor"}, stdin, stdout, stderr); code != 0 {
			return code
		}
		fmt.Fprintln(stdout, "\nThe bundled demo model continues \"A hacker is\":")
		return Run(ctx, []string{"generate", "--model", "demo", "--raw", "--temp", "0", "--max-tokens", "40", "--prompt", "A hacker is"}, stdin, stdout, stderr)
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "inloop: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if !c.ownSignals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	if err := c.run(&env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}, args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintf(stderr, "inloop %s: %s\n", name, termsafe.String(UserMessage(err)))
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: inloop [command] [flags]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'inloop COMMAND -h' for a command's flags.")
}

// newFlags makes a flag set whose errors and help go to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("inloop "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// openBackend opens the backend named by --backend (auto|cpu|mlx), for the
// commands that need no workspace.
func openBackend(name string) (mx.Backend, error) { return mx.Open(name) }

// wsFlags are the flags of every command that works in a workspace.
type wsFlags struct {
	dataDir, backend *string
	dtype            *string // nil: the command has no --dtype (see addDTypeFlag)
	int8Decode       *bool   // with dtype
	int8Prefill      *bool   // with dtype
	bf16Prefill      *bool   // with dtype
}

func addWorkspaceFlags(fs *flag.FlagSet) wsFlags {
	return wsFlags{
		dataDir: fs.String("data-dir", "", "Inloop's data directory (default $INLOOP_HOME or the user config dir)"),
		backend: fs.String("backend", "auto", "compute backend: auto, cpu or mlx"),
	}
}

// addDTypeFlag gives a command --dtype, the type it loads the model in.
func (f *wsFlags) addDTypeFlag(fs *flag.FlagSet) {
	f.dtype = fs.String("dtype", "float32", "type to load the model and compute in: "+inference.DTypeNames+"; auto computes as mlx-lm does")
	f.int8Decode = fs.Bool("int8-decode", false, "decode 4- and 8-bit models on activations rounded to 8 bits, with integer dot products as llama.cpp does: faster on x86-64 CPUs (cpu backend), not exact (off: decoding matches mlx-lm's)")
	f.int8Prefill = fs.Bool("int8-prefill", false, "read prompts of 4- and 8-bit models on activations rounded to 8 bits, with integer dot products: faster on x86-64 CPUs with AVX-512 VNNI (cpu backend), not exact (off: prefill matches mlx-lm's)")
	f.bf16Prefill = fs.Bool("bf16-prefill", false, "read prompts of bfloat16 models (loaded as float32, weights kept at 16 bits) on activations rounded to bfloat16, with bfloat16 dot products: faster on AMD CPUs with AVX-512 BF16 (Zen 4 and later; cpu backend), not exact (off: prefill matches the widened weights')")
}

func (f wsFlags) open(ctx context.Context) (*Workspace, error) {
	opt := Options{DataDir: *f.dataDir, Backend: *f.backend}
	if f.dtype != nil {
		if _, err := inference.ParseDType(*f.dtype); err != nil {
			return nil, fmt.Errorf("--dtype %q: want %s", *f.dtype, inference.DTypeNames)
		}
		opt.DType = *f.dtype
		opt.Int8Decode, opt.Int8Prefill, opt.BF16Prefill = *f.int8Decode, *f.int8Prefill, *f.bf16Prefill
	}
	return Open(ctx, opt)
}

func init() {
	register(command{name: "doctor", summary: "report the compute backends and check that this machine computes correctly", run: doctor})
}

func doctor(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlags("doctor", stderr)
	backend := fs.String("backend", "auto", "compute backend: auto, cpu or mlx")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Inloop on %s/%s, %d cores\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(stdout, "backends registered: %s\n", strings.Join(mx.Backends(), ", "))
	b, err := openBackend(*backend)
	if err != nil {
		return err
	}
	desc := b.Name()
	if d, ok := b.(interface{ Describe() string }); ok {
		desc = d.Describe()
	}
	fmt.Fprintf(stdout, "backend in use: %s\n", desc)
	if mx.HasQuantizedA8(b, 4) {
		fmt.Fprintln(stdout, "--int8-decode: runs here (4- and 8-bit models decode on integer dot products)")
	} else {
		fmt.Fprintln(stdout, "--int8-decode: no integer kernels on this backend; decoding stays exact")
	}
	if mx.HasQuantizedA8Rows(b, 4) {
		fmt.Fprintln(stdout, "--int8-prefill: runs here (4- and 8-bit models read prompts on integer dot products)")
	} else {
		fmt.Fprintln(stdout, "--int8-prefill: no integer kernels for many rows on this backend; prompts are read exactly")
	}
	if mx.HasBF16Rows(b) {
		fmt.Fprintln(stdout, "--bf16-prefill: runs here (bfloat16 models read prompts on bfloat16 dot products)")
	} else {
		fmt.Fprintln(stdout, "--bf16-prefill: no bfloat16 dot products faster than float32 ones on this backend; prompts are read exactly")
	}
	// A tiny real computation with a known answer and a gradient, so a broken BLAS
	// or backend shows up here rather than as a strange training curve.
	x := mx.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	outs, grads, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
		return []*mx.Array{mx.Sum(mx.Square(mx.Matmul(p[0], p[0])), nil, false)}
	}, []*mx.Array{x})
	if err != nil {
		return fmt.Errorf("self-check: %w", err)
	}
	// (x·x) = [[7 10] [15 22]], Σ squares = 49+100+225+484 = 858.
	v, err := outs[0].Item()
	if err != nil || v != 858 {
		return fmt.Errorf("self-check: Σ(x·x)² = %v (%v), want 858", v, err)
	}
	g, err := grads[0].Float32s()
	if err != nil {
		return fmt.Errorf("self-check: %w", err)
	}
	// d/dx Σ(x·x)² = G·xᵀ + xᵀ·G with G = 2·x·x.
	for i, want := range []float32{158, 274, 266, 482} {
		if g[i] != want {
			return fmt.Errorf("self-check: gradient %v, want [158 274 266 482]", g)
		}
	}
	fmt.Fprintf(stdout, "self-check: matmul, reduction and gradient ok\n")
	if active, peak, ok := mx.Memory(b); ok {
		fmt.Fprintf(stdout, "memory: %.2f MiB active, %.2f MiB peak\n", float64(active)/(1<<20), float64(peak)/(1<<20))
	}
	return nil
}

// UserMessage is err as one sentence for a person: the chain of package prefixes
// ("inference: forward: mlxbridge: ...") that wrapping builds is for errors.Is,
// not for reading. An error in the chain that speaks for itself (a
// *inference.ContextError) is used as it is.
func UserMessage(err error) string {
	var ce *inference.ContextError
	if errors.As(err, &ce) {
		msg := ce.Error()
		if errors.Is(err, ErrChatFull) {
			msg = ErrChatFull.Error() + ": " + msg
		}
		return msg
	}
	parts := strings.Split(err.Error(), ": ")
	kept := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && packagePrefixes[p] {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, ": ")
}

// packagePrefixes are the words our packages put before their errors.
var packagePrefixes = map[string]bool{"inference": true, "mlxbridge": true, "trainer": true, "lora": true, "store": true,
	"checkpoint": true, "data": true, "safetensors": true, "tokenizer": true, "chat": true, "hub": true, "quant": true,
	"pretrain": true, "forward": true, "reply": true, "app": true}
