package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/internal/atomicfile"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/lora"
)

// modelSideFiles are copied from the base model folder into a fused one.
var modelSideFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "chat_template.jinja"}

// FuseSpec folds an adapter into its model's weights.
type FuseSpec struct {
	Model      string // as the registry names it
	Adapter    string // an adapter folder; empty: the model's newest adapter
	Out        string // the new model folder; empty: models/NAME-fused-TIME under the data directory
	Dequantize bool   // leave fused layers of a quantized model dense
}

// Fused is the model Fuse wrote.
type Fused struct {
	store.Model
	Layers int // adapted layers folded in
}

// Fuse writes Model with Adapter folded into its weights as a new model folder and
// registers it.
func (w *Workspace) Fuse(ctx context.Context, spec FuseSpec) (Fused, error) {
	m, info, err := w.LoadModel(ctx, spec.Model)
	if err != nil {
		return Fused{}, err
	}
	if spec.Adapter == "" {
		a, err := w.Store.LatestAdapter(ctx, info.Name)
		if err != nil {
			return Fused{}, fmt.Errorf("model %s has no adapter yet; name one: %w", info.Name, err)
		}
		spec.Adapter = a.Path
	}
	if spec.Out == "" {
		spec.Out = w.path("models", safeName(info.Name)+"-fused-"+stamp())
	}
	if _, err := inference.LoadAdapter(m, spec.Adapter); err != nil {
		return Fused{}, err
	}
	paths, err := lora.Fuse(m, lora.FuseOptions{Dequantize: spec.Dequantize})
	if err != nil {
		return Fused{}, err
	}
	if err := inference.SaveModel(m, spec.Out); err != nil {
		return Fused{}, err
	}
	if cfg := m.Config(); spec.Dequantize && cfg.Quantization != nil {
		// The fused layers are dense now: say so per module, as mlx-lm's
		// mixed-precision configs do.
		q := *cfg.Quantization
		q.Overrides = maps.Clone(q.Overrides)
		if q.Overrides == nil {
			q.Overrides = map[string]*inference.QuantParams{}
		}
		for _, p := range paths {
			q.Overrides[p] = nil
		}
		cfg.Quantization = &q
		raw, err := cfg.JSON()
		if err != nil {
			return Fused{}, err
		}
		if err := atomicfile.WriteFile(filepath.Join(spec.Out, "config.json"), raw, 0o644); err != nil {
			return Fused{}, err
		}
	}
	for _, f := range modelSideFiles {
		raw, err := os.ReadFile(filepath.Join(info.Path, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return Fused{}, err
		}
		if err := atomicfile.WriteFile(filepath.Join(spec.Out, f), raw, 0o644); err != nil {
			return Fused{}, err
		}
	}
	reg, err := w.RegisterModel(ctx, spec.Out, "", "fused")
	return Fused{Model: reg, Layers: len(paths)}, err
}
