package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/hub"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
)

// The model registry. A name resolves the same way in every command and screen:
//
//   - "demo" is the bundled demo model, always there;
//   - a name or path the store remembers (pulled, opened, quantized or fused before);
//   - "ORG/NAME" pulled into the data directory;
//   - any other existing model folder, remembered from then on.

// ErrUnknownModel is returned (wrapped) for a name that resolves to nothing.
var ErrUnknownModel = errors.New("unknown model")

// registerDemo extracts the bundled demo model (once per build) and records it.
func (w *Workspace) registerDemo(ctx context.Context) (store.Model, error) {
	dir, err := demoModelDir(w.Dir)
	if err != nil {
		return store.Model{}, err
	}
	return w.RegisterModel(ctx, dir, DemoModelName, "demo")
}

// RegisterModel records the model folder dir under name (its folder name when
// empty), described from its config.json and weight files.
func (w *Workspace) RegisterModel(ctx context.Context, dir, name, source string) (store.Model, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return store.Model{}, err
	}
	cfg, err := inference.ReadConfig(abs)
	if err != nil {
		return store.Model{}, fmt.Errorf("%s is not a model folder: %w", dir, err)
	}
	if name == "" {
		name = w.freeName(ctx, filepath.Base(abs), abs)
	}
	m := store.Model{Name: name, Path: abs, Architecture: cfg.ModelType, Params: configParams(cfg), Bytes: weightFileBytes(abs), Source: source}
	if cfg.Quantization != nil {
		m.Bits = cfg.Quantization.Bits
	}
	return w.Store.UpsertModel(ctx, m)
}

// freeName is base, or base-2, base-3, ... where another folder has the name;
// a folder registered before keeps its name.
func (w *Workspace) freeName(ctx context.Context, base, path string) string {
	if prev, err := w.Store.ModelByPath(ctx, path); err == nil {
		return prev.Name
	}
	name := base
	for i := 2; ; i++ {
		m, err := w.Store.ModelByName(ctx, name)
		if err != nil || m.Path == path {
			return name
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

// Models lists the models the workspace knows, the demo model among them.
func (w *Workspace) Models(ctx context.Context) ([]store.Model, error) {
	return w.Store.Models(ctx)
}

// ResolveModel turns what a user typed into a registered model (see the rules
// above) and marks it used.
func (w *Workspace) ResolveModel(ctx context.Context, name string) (store.Model, error) {
	if name == "" {
		return store.Model{}, fmt.Errorf("%w: no model named", ErrUnknownModel)
	}
	m, err := w.resolve(ctx, name)
	if err != nil {
		return store.Model{}, err
	}
	if _, err := os.Stat(filepath.Join(m.Path, "config.json")); err != nil {
		return store.Model{}, fmt.Errorf("model %q: its folder %s is gone or incomplete: %w", name, m.Path, err)
	}
	_ = w.Store.TouchModel(ctx, m.ID)
	return m, nil
}

func (w *Workspace) resolve(ctx context.Context, name string) (store.Model, error) {
	if name == DemoModelName {
		if st, err := os.Stat(name); err != nil || !st.IsDir() { // a folder named demo here wins
			return w.registerDemo(ctx)
		}
	}
	if isDir(name) {
		abs, _ := filepath.Abs(name)
		if m, err := w.Store.ModelByPath(ctx, abs); err == nil {
			return m, nil
		}
		return w.RegisterModel(ctx, name, "", "folder")
	}
	if m, err := w.Store.ModelByName(ctx, name); err == nil {
		return m, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Model{}, err
	}
	if hub.ValidateRepo(name) == nil {
		if dir := modelDir(w.Dir, name); isDir(dir) {
			return w.RegisterModel(ctx, dir, name, "pulled")
		}
		return store.Model{}, fmt.Errorf("%w %q: not downloaded yet (inloop pull %s)", ErrUnknownModel, name, name)
	}
	return store.Model{}, fmt.Errorf("%w %q: not a model folder, a pulled ORG/NAME or a remembered name", ErrUnknownModel, name)
}

// LoadModel resolves name and loads the model on the workspace's backend.
func (w *Workspace) LoadModel(ctx context.Context, name string) (*inference.Model, store.Model, error) {
	info, err := w.ResolveModel(ctx, name)
	if err != nil {
		return nil, info, err
	}
	m, err := w.loadFolder(info.Path)
	return m, info, err
}

// loadFolder loads the model in dir on the workspace's backend, in its dtype.
func (w *Workspace) loadFolder(dir string) (*inference.Model, error) {
	return inference.LoadWithOptions(dir, w.Backend, *w.loadOpts.Load())
}

// DType is the --dtype models are loaded in: float32, bfloat16, float16 or auto.
func (w *Workspace) DType() string { return w.loadOpts.Load().String() }

// SetDType changes the type models are loaded in from now on (see
// Options.DType). Open chats keep the model they have; new ones load afresh.
func (w *Workspace) SetDType(dtype string) error {
	load, err := inference.ParseDType(dtype)
	if err != nil {
		return err
	}
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	old := w.loadOpts.Load()
	load.Int8Decode, load.Int8Prefill, load.BF16Prefill = old.Int8Decode, old.Int8Prefill, old.BF16Prefill
	w.loadOpts.Store(&load)
	clear(w.loaded)
	return nil
}

// Int8Decode reports whether 4- and 8-bit models decode on 8-bit activations
// (Options.Int8Decode).
func (w *Workspace) Int8Decode() bool { return w.loadOpts.Load().Int8Decode }

// Int8DecodeRuns reports whether the choice changes anything here: whether the
// backend multiplies 4-bit weights on integers (elsewhere decoding stays exact).
func (w *Workspace) Int8DecodeRuns() bool { return mx.HasQuantizedA8(w.Backend, 4) }

// SetInt8Decode chooses whether 4- and 8-bit models decode on 8-bit activations
// from now on (Options.Int8Decode). Models already loaded, open chats' included,
// switch at their next reply; a run in progress is not touched (training is exact
// either way).
func (w *Workspace) SetInt8Decode(on bool) {
	w.setAct(func(o *inference.LoadOptions) { o.Int8Decode = on }, func(m *inference.Model) { m.SetInt8Decode(on) })
}

// setAct records a rounded-activation choice in the load options (set) and makes
// it on every loaded model (apply), under the load lock.
func (w *Workspace) setAct(set func(*inference.LoadOptions), apply func(*inference.Model)) {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	load := *w.loadOpts.Load()
	set(&load)
	w.loadOpts.Store(&load)
	for _, m := range w.loaded {
		apply(m)
	}
}

// Int8Prefill reports whether prompts of 4- and 8-bit models are read on 8-bit
// activations (Options.Int8Prefill).
func (w *Workspace) Int8Prefill() bool { return w.loadOpts.Load().Int8Prefill }

// Int8PrefillRuns reports whether that choice changes anything here: whether the
// backend multiplies many rows of 4-bit weights on integers (the cpu backend with
// AVX-512 VNNI; elsewhere prompts are read exactly).
func (w *Workspace) Int8PrefillRuns() bool { return mx.HasQuantizedA8Rows(w.Backend, 4) }

// SetInt8Prefill chooses whether prompts of 4- and 8-bit models are read on 8-bit
// activations from now on (Options.Int8Prefill), as SetInt8Decode chooses for
// their decode steps: every product of many rows no gradient flows through, so a
// decision's scoring too. Loaded models and open chats switch at their next call.
func (w *Workspace) SetInt8Prefill(on bool) {
	w.setAct(func(o *inference.LoadOptions) { o.Int8Prefill = on }, func(m *inference.Model) { m.SetInt8Prefill(on) })
}

// BF16Prefill reports whether prompts of bfloat16 models are read on bfloat16
// activations (Options.BF16Prefill).
func (w *Workspace) BF16Prefill() bool { return w.loadOpts.Load().BF16Prefill }

// BF16PrefillRuns reports whether that choice changes anything here: whether the
// backend multiplies many rows by bfloat16 weights in bfloat16 pairs (the cpu
// backend on CPUs with AVX-512 BF16, for a bfloat16 checkpoint loaded as float32,
// whose weights stay 16-bit; elsewhere prompts are read exactly).
func (w *Workspace) BF16PrefillRuns() bool { return mx.HasBF16Rows(w.Backend) }

// SetBF16Prefill chooses whether prompts of bfloat16 models are read on bfloat16
// activations from now on (Options.BF16Prefill), as SetInt8Prefill chooses for 4-
// and 8-bit models. Loaded models and open chats switch at their next call.
func (w *Workspace) SetBF16Prefill(on bool) {
	w.setAct(func(o *inference.LoadOptions) { o.BF16Prefill = on }, func(m *inference.Model) { m.SetBF16Prefill(on) })
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// weightFileBytes is the size of a folder's safetensors files.
func weightFileBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
	}
	return n
}

// configParams counts a decoder's parameters from its config: embeddings,
// attention and MLP projections, norms, and an untied output head.
func configParams(c inference.Config) int64 {
	h, inter, v := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	hd := int64(c.HeadDim)
	if hd == 0 && c.NumAttentionHeads > 0 {
		hd = h / int64(c.NumAttentionHeads)
	}
	q, kv := int64(c.NumAttentionHeads)*hd, int64(c.NumKeyValueHeads)*hd
	layer := h*q + 2*h*kv + q*h + 3*h*inter + 2*h
	n := v*h + int64(c.NumHiddenLayers)*layer + h
	if !c.TieWordEmbeddings {
		n += v * h
	}
	return n
}
