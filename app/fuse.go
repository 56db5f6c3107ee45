package app

import (
	"cmp"
	"context"
	"fmt"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/store"
)

// FuseSpec folds an adapter into its model's weights.
type FuseSpec struct {
	Model      string // as the registry names it
	Adapter    string // an adapter folder; empty: the model's newest adapter
	Out        string // the new model folder; empty: models/NAME-fused-TIME under the data directory
	Dequantize bool   // write a quantized model dense, as mlx-lm's fuse --dequantize does
	// DType is the type of the written weights: "" or "auto" keeps the base's own
	// (bfloat16 stays bfloat16, as mlx-lm's fuse writes it); "float32",
	// "bfloat16" or "float16" converts every float tensor, as mlx_lm.convert
	// --dtype does, and says so in config.json.
	DType string
	// Kernel is whose rounding re-quantizes the fused layers of a quantized base:
	// "gpu" (empty: what mlx-lm's fuse writes on a Mac) or "cpu" (on Linux).
	Kernel string
}

// Fused is the model Fuse wrote.
type Fused struct {
	store.Model
	Layers int // adapted layers folded in
}

// Fuse writes Model with Adapter folded into its weights as a new model folder and
// registers it. The model is loaded in its own dtypes, whatever the workspace
// computes in, so the folder holds what mlx-lm's fuse would write.
func (w *Workspace) Fuse(ctx context.Context, spec FuseSpec) (Fused, error) {
	var cast mx.DType
	switch spec.DType {
	case "", "auto":
		spec.DType = "auto"
	default:
		opts, err := inference.ParseDType(spec.DType)
		if err != nil {
			return Fused{}, err
		}
		cast = opts.DType
	}
	kernel, err := quant.ParseKernel(cmp.Or(spec.Kernel, "gpu"))
	if err != nil {
		return Fused{}, err
	}
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return Fused{}, err
	}
	m, err := inference.LoadWithOptions(info.Path, w.Backend, inference.LoadOptions{KeepDType: true})
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
	paths, err := m.FuseAdaptersWith(inference.FuseOptions{Dequantize: spec.Dequantize, Kernel: kernel})
	if err != nil {
		return Fused{}, err
	}
	if spec.Dequantize {
		if err := m.Dequantize(); err != nil {
			return Fused{}, err
		}
	}
	if spec.DType != "auto" {
		if err := m.CastFloats(cast); err != nil {
			return Fused{}, err
		}
	}
	if err := inference.SaveModelFrom(m, info.Path, spec.Out); err != nil {
		return Fused{}, err
	}
	reg, err := w.RegisterModel(ctx, spec.Out, "", "fused")
	return Fused{Model: reg, Layers: len(paths)}, err
}
