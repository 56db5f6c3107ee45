package inference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/inloop/inloop/internal/atomicfile"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// What a fused model is written as: mlx-lm's fuse writes the base's tensors in the
// base's dtypes (a bfloat16 model stays bfloat16, a quantized one keeps its packed
// words and half-precision scales), its config.json with every field kept, and
// drops the quantization block only with --dequantize. These are the pieces.

// Dequantize turns every quantized Linear and Embedding dense, in its scales'
// dtype, and drops the config's quantization: mlx-lm's dequantize_model.
func (m *Model) Dequantize() error {
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	type dense struct {
		weight *mx.Array
		lin    *Linear
		emb    *Embedding
	}
	var plan []dense
	err := m.forEachModule(func(path string, mod any) error {
		var w *mx.Array
		switch mod := mod.(type) {
		case *Linear:
			if !mod.quantized() {
				return nil
			}
			w = mx.Dequantize(mod.Weight, mod.Scales, mod.Biases, mod.GroupSize, mod.Bits)
			plan = append(plan, dense{weight: w, lin: mod})
		case *Embedding:
			if !mod.quantized() {
				return nil
			}
			w = mx.Dequantize(mod.Weight, mod.Scales, mod.Biases, mod.GroupSize, mod.Bits)
			plan = append(plan, dense{weight: w, emb: mod})
		}
		if err := mx.Eval(w); err != nil {
			return fmt.Errorf("inference: dequantize %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err // nothing changed yet
	}
	for _, d := range plan {
		if d.lin != nil {
			d.lin.Weight, d.lin.Scales, d.lin.Biases, d.lin.GroupSize, d.lin.Bits = d.weight, nil, nil, 0, 0
		} else {
			d.emb.Weight, d.emb.Scales, d.emb.Biases, d.emb.GroupSize, d.emb.Bits = d.weight, nil, nil, 0, 0
			d.emb.dtype = d.weight.DType()
		}
	}
	m.cfg.Quantization = nil
	return nil
}

// CastFloats converts every float tensor of m to dt (the scales and biases of
// quantized layers too, as mlx_lm.convert --dtype does; the packed words stay)
// and records dt as the config's torch_dtype.
func (m *Model) CastFloats(dt mx.DType) error {
	if !dt.IsFloat() {
		return fmt.Errorf("inference: cast to %s: not a float type", dt)
	}
	m.ad.mu.Lock()
	defer m.ad.mu.Unlock()
	type cast struct {
		slot **mx.Array
		a    *mx.Array
	}
	var plan []cast
	var err error
	m.slots(func(name string, slot **mx.Array) {
		if err != nil || !(*slot).DType().IsFloat() || (*slot).DType() == dt {
			return
		}
		a := mx.AsType(*slot, dt)
		if e := mx.Eval(a); e != nil {
			err = fmt.Errorf("inference: cast %s: %w", name, e)
		}
		plan = append(plan, cast{slot, a})
	})
	if err != nil {
		return err
	}
	for _, c := range plan {
		*c.slot = c.a
	}
	m.Embed.dtype = dt
	m.cfg.TorchDType = dt.String()
	return nil
}

// SaveModelFrom writes m as the new model folder dir, made from the folder base
// (a fused or converted copy of it): base's config.json with every field kept,
// its quantization block dropped when m has none and torch_dtype set to m's;
// m's tensors in their own dtypes, in model.safetensors or shards of at most
// 5 GB with an index, as mlx-lm saves; and base's other files (tokenizer,
// generation config, chat template). The folder is assembled beside dir and
// renamed into place, so it appears whole or not at all; dir must not exist, or
// be an empty folder.
func SaveModelFrom(m *Model, base, dir string) error {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("inference: %s exists and is not empty", dir)
	} else if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("inference: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	tmp, err := atomicfile.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("inference: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	if err := saveShards(m.Params(), tmp); err != nil {
		return err
	}
	if err := writeDerivedConfig(base, tmp, m.cfg); err != nil {
		return err
	}
	if err := copyOtherFiles(base, tmp); err != nil {
		return err
	}
	os.Remove(dir) // an empty folder the user made for it
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("inference: %w", err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return fmt.Errorf("inference: sync %s: %w", parent, err)
	}
	return nil
}

// saveShards writes params into dir as mlx-lm does: one model.safetensors, or
// shards of at most maxShardBytes with model.safetensors.index.json.
func saveShards(params map[string]*mx.Array, dir string) error {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range params {
			if !yield(n) {
				return
			}
		}
	})
	var shards [][]string
	var size, total int64
	for _, n := range names {
		b := params[n].Nbytes()
		if len(shards) == 0 || (size+b > maxShardBytes && size > 0) {
			shards, size = append(shards, nil), 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], n)
		size += b
		total += b
	}
	meta := map[string]string{"format": "mlx"}
	weightMap := map[string]string{}
	for i, shard := range shards {
		file := safetensors.SingleFileName
		if len(shards) > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		part := map[string]*mx.Array{}
		for _, n := range shard {
			part[n] = params[n]
			weightMap[n] = file
		}
		if err := mx.SaveSafetensors(filepath.Join(dir, file), part, meta); err != nil {
			return fmt.Errorf("inference: %w", err)
		}
	}
	if len(shards) > 1 {
		idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return err
		}
		return writeFileAtomic(filepath.Join(dir, safetensors.IndexFileName), append(idx, '\n'))
	}
	return nil
}

// writeDerivedConfig writes base's config.json into dir with every field and its
// number formatting kept, except what cfg changed: the quantization blocks are
// dropped when cfg has none, and torch_dtype (and dtype, where the file has it)
// follows cfg's.
func writeDerivedConfig(base, dir string, cfg Config) error {
	data, err := readCapped(filepath.Join(base, "config.json"), maxConfigBytes)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("inference: %s/config.json: %w", base, err)
	}
	if cfg.Quantization == nil {
		delete(raw, "quantization")
		delete(raw, "quantization_config")
	} else if _, ok := raw["quantization"]; !ok {
		raw["quantization"], raw["quantization_config"] = cfg.Quantization, cfg.Quantization
	}
	if was, err := ParseConfig(data); err == nil && cfg.TorchDType != "" && was.TorchDType != cfg.TorchDType {
		set := false
		for _, k := range []string{"torch_dtype", "dtype"} {
			if _, ok := raw[k]; ok {
				raw[k], set = cfg.TorchDType, true
			}
		}
		if !set {
			raw["torch_dtype"] = cfg.TorchDType
		}
	}
	out, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "config.json"), append(out, '\n'))
}
