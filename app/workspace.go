package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
)

// Options says where a Workspace lives and what it computes on.
type Options struct {
	// DataDir is the data directory; empty means $INLOOP_HOME, else the user's
	// config directory + "/Inloop".
	DataDir string
	// Backend is "auto" (the default), "cpu" or "mlx".
	Backend string
	// DType is the type models are loaded and computed in: "float32" (the
	// default), "bfloat16", "float16" or "auto", each checkpoint's own, which
	// is what mlx-lm computes in (inference.ParseDType). SetDType changes it.
	DType string
	// Int8Decode decodes 4- and 8-bit models on 8-bit activations
	// (inference.LoadOptions.Int8Decode); SetInt8Decode changes it.
	Int8Decode bool
	// Int8Prefill reads prompts of 4- and 8-bit models on 8-bit activations
	// (inference.LoadOptions.Int8Prefill); SetInt8Prefill changes it.
	Int8Prefill bool
	// BF16Prefill reads prompts of bfloat16 models, loaded as float32 with their
	// weights kept at 16 bits, on bfloat16 activations
	// (inference.LoadOptions.BF16Prefill); SetBF16Prefill changes it.
	BF16Prefill bool
}

// Workspace is the one API the command line, the window and the adaptation loops
// stand on: the data directory, the store of everything remembered between runs,
// the compute backend (opened once and passed down), the model registry, the jobs
// running now, and chat sessions.
//
// A Workspace is safe for concurrent use. Close it when done: running jobs are
// cancelled and wait for their last checkpoint.
type Workspace struct {
	Dir     string
	Store   *store.Store
	Backend mx.Backend

	// Interrupted lists the runs that were running when the app last stopped
	// (a quit or a crash). Each can continue with Resume.
	Interrupted []store.Run

	mu   sync.Mutex
	jobs map[int64]*Job

	loadMu   sync.Mutex
	loaded   map[string]*inference.Model // by folder: base weights shared by chats
	loadOpts atomic.Pointer[inference.LoadOptions]
	wg       sync.WaitGroup
	closed   bool

	idleMu     sync.Mutex
	chatActive int         // chat turns and feedback steps running (chatBusy)
	idleTimer  *time.Timer // the release after the last of them
}

// Open opens (creating if needed) the workspace in opt.DataDir.
func Open(ctx context.Context, opt Options) (*Workspace, error) {
	dir, err := DataDir(opt.DataDir)
	if err != nil {
		return nil, err
	}
	load, err := inference.ParseDType(opt.DType)
	if err != nil {
		return nil, err
	}
	load.Int8Decode, load.Int8Prefill, load.BF16Prefill = opt.Int8Decode, opt.Int8Prefill, opt.BF16Prefill
	name := opt.Backend
	if name == "" {
		name = "auto"
	}
	b, err := mx.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(dir, "inloop.db"))
	if err != nil {
		return nil, err
	}
	w := &Workspace{Dir: dir, Store: st, Backend: b, jobs: map[int64]*Job{}}
	w.loadOpts.Store(&load)
	if w.Interrupted, err = st.MarkRunningInterrupted(ctx); err != nil {
		st.Close()
		return nil, err
	}
	if _, err := w.registerDemo(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return w, nil
}

// Close cancels running jobs, waits for them to stop, and closes the store.
func (w *Workspace) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	for _, j := range w.jobs {
		j.Cancel()
	}
	w.mu.Unlock()
	w.idleMu.Lock()
	if w.idleTimer != nil {
		w.idleTimer.Stop()
	}
	w.idleMu.Unlock()
	w.wg.Wait()
	return w.Store.Close()
}

// ErrClosed is returned by calls on a closed Workspace.
var ErrClosed = errors.New("app: workspace is closed")

// path returns a path inside the data directory.
func (w *Workspace) path(elem ...string) string {
	return filepath.Join(append([]string{w.Dir}, elem...)...)
}

func (w *Workspace) String() string {
	return fmt.Sprintf("workspace %s (backend %s)", w.Dir, w.Backend.Name())
}
