package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/hub"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/store"
)

// QuantizeSpec is a quantization job: an mlx-lm compatible copy of Model at Bits
// bits with GroupSize weights per scale, and the perplexity of Text before and
// after (the built-in English paragraph when empty).
type QuantizeSpec struct {
	Model     string `json:"model"`
	Out       string `json:"out"` // empty: models/<name>-<bits>bit under the data directory
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
	Text      string `json:"text,omitempty"`
	Window    int    `json:"window"` // perplexity context in tokens
	// Kernel is the MLX quantize kernel whose rounding is written: "gpu" (empty:
	// what mlx_lm.convert writes on a Mac) or "cpu" (on Linux without CUDA).
	Kernel string `json:"kernel,omitempty"`
}

// QuantizeResult is what a quantization job reports at the end.
type QuantizeResult struct {
	Quantized, Skipped                int
	BytesBefore, BytesAfter           int64
	PerplexityBefore, PerplexityAfter float64
	Tokens                            int
	Seconds                           float64
	Out                               string
}

// StartQuantize starts a quantization job; the new model is registered when done.
func (w *Workspace) StartQuantize(ctx context.Context, spec QuantizeSpec) (*Job, error) {
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	spec.Model = info.Path // names can be reused; the folder is the identity
	if spec.Bits == 0 {
		spec.Bits = 4
	}
	if spec.GroupSize == 0 {
		spec.GroupSize = 64
	}
	if spec.Window == 0 {
		spec.Window = 512
	}
	if spec.Kernel == "" {
		spec.Kernel = "gpu"
	}
	if _, err := quant.ParseKernel(spec.Kernel); err != nil {
		return nil, err
	}
	if spec.Out == "" {
		spec.Out = w.path("models", fmt.Sprintf("%s-%dbit", safeName(info.Name), spec.Bits))
	}
	if _, err := os.Stat(spec.Out); err == nil {
		return nil, fmt.Errorf("%s exists already; choose another output folder", spec.Out)
	}
	params, _ := json.Marshal(spec)
	return w.startQuantize(ctx, store.Run{Kind: store.KindQuantize, Model: info.Name, ModelID: info.ID, Params: params, Output: spec.Out}, spec)
}

func (w *Workspace) startQuantize(ctx context.Context, run store.Run, spec QuantizeSpec) (*Job, error) {
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	return w.start(ctx, run, func(ctx context.Context, _ int64, emit func(Progress)) (any, string, error) {
		if _, err := os.Stat(spec.Out); err == nil { // a resumed run starts over
			if err := os.RemoveAll(spec.Out); err != nil {
				return nil, "", err
			}
		}
		text := spec.Text
		if text == "" {
			text = sampleText
		}
		tok, err := tokenizer.Load(info.Path)
		if err != nil {
			return nil, "", err
		}
		ids, err := tok.Encode(text, true)
		if err != nil {
			return nil, "", err
		}
		emit(Progress{Phase: PhaseInfo, Message: fmt.Sprintf("perplexity of %s on %d tokens", info.Name, len(ids))})
		before, err := perplexityOf(info.Path, w.Backend, ids, spec.Window)
		if err != nil {
			return nil, "", fmt.Errorf("perplexity before: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		emit(Progress{Phase: PhaseInfo, Message: fmt.Sprintf("quantizing to %d-bit, group %d, %s kernel rounding", spec.Bits, spec.GroupSize, cmp.Or(spec.Kernel, "gpu"))})
		kernel, err := quant.ParseKernel(cmp.Or(spec.Kernel, "gpu"))
		if err != nil {
			return nil, "", err
		}
		rep, err := inference.QuantizeModelWith(info.Path, spec.Out, inference.QuantizeOptions{Bits: spec.Bits, GroupSize: spec.GroupSize, Kernel: kernel})
		if err != nil {
			return nil, "", err
		}
		after, err := perplexityOf(spec.Out, w.Backend, ids, spec.Window)
		if err != nil {
			return nil, spec.Out, fmt.Errorf("perplexity after: %w", err)
		}
		res := QuantizeResult{Quantized: len(rep.Quantized), Skipped: len(rep.Skipped), BytesBefore: rep.BytesBefore, BytesAfter: rep.BytesAfter,
			PerplexityBefore: before, PerplexityAfter: after, Tokens: len(ids), Seconds: rep.Duration.Seconds(), Out: spec.Out}
		if _, err := w.RegisterModel(context.WithoutCancel(ctx), spec.Out, fmt.Sprintf("%s-%dbit", info.Name, spec.Bits), "quantized"); err != nil {
			return res, spec.Out, err
		}
		return res, spec.Out, nil
	})
}

// PullSpec is a download from the Hugging Face hub: the one job that uses the
// network, and only when the user starts it.
type PullSpec struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Dir      string `json:"dir,omitempty"` // empty: models/ORG--NAME under the data directory
}

// StartPull starts a download; the model is registered under its repo name when
// done. A cut-off pull resumes from the bytes it has.
func (w *Workspace) StartPull(ctx context.Context, spec PullSpec) (*Job, error) {
	if err := hub.ValidateRepo(spec.Repo); err != nil {
		return nil, err
	}
	if spec.Dir == "" {
		spec.Dir = modelDir(w.Dir, spec.Repo)
	}
	params, _ := json.Marshal(spec)
	return w.startPull(ctx, store.Run{Kind: store.KindPull, Model: spec.Repo, Params: params, Output: spec.Dir}, spec)
}

func (w *Workspace) startPull(ctx context.Context, run store.Run, spec PullSpec) (*Job, error) {
	return w.start(ctx, run, func(ctx context.Context, _ int64, emit func(Progress)) (any, string, error) {
		var last time.Time
		start := time.Now()
		err := hub.Pull(ctx, hub.PullOptions{
			Endpoint: spec.Endpoint, Repo: spec.Repo, Revision: spec.Revision, Dir: spec.Dir, Token: os.Getenv("HF_TOKEN"),
			Progress: func(file string, done, total int64) {
				if now := time.Now(); now.Sub(last) > 250*time.Millisecond || done == total {
					last = now
					emit(Progress{Phase: PhaseDownload, File: file, Done: done, Total: total})
				}
			},
		})
		if err != nil {
			return nil, spec.Dir, err
		}
		res := map[string]any{"bytes": weightFileBytes(spec.Dir), "seconds": time.Since(start).Seconds(), "dir": spec.Dir}
		if _, err := w.RegisterModel(context.WithoutCancel(ctx), spec.Dir, spec.Repo, "pulled"); err != nil {
			emit(Progress{Phase: PhaseWarning, Message: fmt.Sprintf("downloaded, but not usable as a model here: %v", err)})
		}
		return res, spec.Dir, nil
	})
}
