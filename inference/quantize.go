package inference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inloop/inloop/internal/atomicfile"
	"github.com/inloop/inloop/internal/capped"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Quantization follows mlx-lm's convert: every Linear and the embedding (and an
// untied lm_head) whose input size is a multiple of the group size is quantized in
// MLX's affine format; norms and biases stay as they are. Scales and biases take
// the weight's dtype, as mx.quantize gives them.

// quantizable reports whether mlx-lm would quantize a module with input size in.
func quantizable(in int, p QuantParams) bool { return in%p.GroupSize == 0 }

// forEachModule calls fn on every Linear and Embedding of m with its path.
func (m *Model) forEachModule(fn func(path string, mod any) error) error {
	visit := func(prefix string, v any) error {
		return walk(prefix, reflect.ValueOf(v), func(path string, f reflect.Value) error {
			switch mod := f.Interface().(type) {
			case *Linear, *Embedding:
				return fn(path, mod)
			}
			return nil
		})
	}
	if err := visit("", m); err != nil {
		return err
	}
	for i, l := range m.layers {
		if err := visit("model.layers."+strconv.Itoa(i)+".", l); err != nil {
			return err
		}
	}
	return nil
}

// quantize replaces m's dense Linear and Embedding weights in place (NewRandom).
func (m *Model) quantize(q *Quantization) error {
	err := m.forEachModule(func(path string, mod any) error {
		p, ok := q.For(path)
		switch mod := mod.(type) {
		case *Linear:
			if !ok || mod.quantized() || !quantizable(mod.In, p) {
				return nil
			}
			mod.Weight, mod.Scales, mod.Biases = mx.Quantize(mod.Weight, p.GroupSize, p.Bits)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
			return firstErrOf(mod.Weight, mod.Scales, mod.Biases)
		case *Embedding:
			if !ok || mod.quantized() || !quantizable(mod.Dim, p) {
				return nil
			}
			mod.Weight, mod.Scales, mod.Biases = mx.Quantize(mod.Weight, p.GroupSize, p.Bits)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
			return firstErrOf(mod.Weight, mod.Scales, mod.Biases)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inference: quantize: %w", err)
	}
	m.cfg.Quantization = q
	return nil
}

func firstErrOf(xs ...*mx.Array) error {
	for _, x := range xs {
		if err := x.Err(); err != nil {
			return err
		}
	}
	return nil
}

// QuantizeReport says what QuantizeModel did.
type QuantizeReport struct {
	Bits, GroupSize int
	Kernel          quant.Kernel
	BytesBefore     int64    // safetensors bytes of the source
	BytesAfter      int64    // safetensors bytes written
	Quantized       []string // module paths quantized
	Skipped         []string // modules left dense: input size not a multiple of the group size
	Shards          int
	Duration        time.Duration
}

// maxShardBytes is Hugging Face's and mlx-lm's shard size (a variable for tests).
var maxShardBytes int64 = 5 << 30

// QuantizeModel writes an mlx-lm compatible quantized copy of the model in srcDir to
// dstDir, which must not exist: weights in model.safetensors (or shards of at most
// 5 GB with an index), config.json with "quantization" and "quantization_config",
// and every other file (tokenizer, generation config, ...) copied. The folder is
// assembled beside dstDir and renamed into place, so it appears whole or not at all.
func QuantizeModel(srcDir, dstDir string, bits, groupSize int) (QuantizeReport, error) {
	return QuantizeModelWith(srcDir, dstDir, QuantizeOptions{Bits: bits, GroupSize: groupSize})
}

// QuantizeOptions are QuantizeModelWith's settings.
type QuantizeOptions struct {
	Bits, GroupSize int
	// Kernel is the MLX quantize kernel whose rounding is reproduced: quant.GPU
	// (the zero value) writes what mlx_lm.convert writes on a Mac (Metal) or a
	// CUDA machine, quant.CPU what it writes with MLX's CPU backend (Linux
	// without CUDA). The two differ in a few words of some groups (see quant.Kernel).
	Kernel quant.Kernel
}

// QuantizeModelWith is QuantizeModel with a choice of kernel.
func QuantizeModelWith(srcDir, dstDir string, opt QuantizeOptions) (QuantizeReport, error) {
	start := time.Now()
	bits, groupSize := opt.Bits, opt.GroupSize
	rep := QuantizeReport{Bits: bits, GroupSize: groupSize, Kernel: opt.Kernel}
	if err := quant.Validate(bits, groupSize); err != nil {
		return rep, fmt.Errorf("inference: quantize: %w", err)
	}
	if _, err := os.Lstat(dstDir); err == nil {
		return rep, fmt.Errorf("inference: quantize: %s already exists", dstDir)
	}
	cfg, err := ReadConfig(srcDir)
	if err != nil {
		return rep, err
	}
	if cfg.Quantization != nil {
		return rep, fmt.Errorf("inference: quantize: %s is already quantized (%d bits)", srcDir, cfg.Quantization.Bits)
	}
	set, err := safetensors.OpenDir(srcDir)
	if err != nil {
		return rep, fmt.Errorf("inference: quantize: %w", err)
	}
	defer set.Close()
	for _, path := range set.Shards() {
		if st, err := os.Stat(path); err == nil {
			rep.BytesBefore += st.Size()
		}
	}

	// The architecture says which tensors are Linear or Embedding weights.
	_, hasHead := set.Info("lm_head.weight")
	skel, err := build(cfg, nil, hasHead)
	if err != nil {
		return rep, err
	}
	p := QuantParams{GroupSize: groupSize, Bits: bits}
	modules := map[string]int{} // path.weight -> input size, for the quantized ones
	skel.forEachModule(func(path string, mod any) error {
		in := 0
		switch mod := mod.(type) {
		case *Linear:
			in = mod.In
		case *Embedding:
			in = mod.Dim
		}
		if quantizable(in, p) {
			modules[path+".weight"] = in
			rep.Quantized = append(rep.Quantized, path)
		} else {
			rep.Skipped = append(rep.Skipped, path)
		}
		return nil
	})

	plan, err := planShards(set, modules, skel.cfg.TieWordEmbeddings, p)
	if err != nil {
		return rep, err
	}
	tmp, err := atomicfile.MkdirTemp(filepath.Dir(filepath.Clean(dstDir)), "."+filepath.Base(dstDir)+".tmp-")
	if err != nil {
		return rep, fmt.Errorf("inference: quantize: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename

	weightMap := map[string]string{}
	var total int64
	for i, shard := range plan {
		name := safetensors.SingleFileName
		if len(plan) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(plan))
		}
		var tensors []safetensors.Tensor
		for _, tn := range shard {
			ts, err := quantizeTensor(set, tn, modules, p, opt.Kernel)
			if err != nil {
				return rep, err
			}
			for _, t := range ts {
				weightMap[t.Name] = name
				total += int64(len(t.Data))
			}
			tensors = append(tensors, ts...)
		}
		out := filepath.Join(tmp, name)
		if err := safetensors.WriteFile(out, tensors, map[string]string{"format": "mlx"}); err != nil {
			return rep, fmt.Errorf("inference: quantize: %w", err)
		}
		st, err := os.Stat(out)
		if err != nil {
			return rep, fmt.Errorf("inference: quantize: %w", err)
		}
		rep.BytesAfter += st.Size()
	}
	rep.Shards = len(plan)
	if len(plan) > 1 {
		idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return rep, err
		}
		if err := writeFileAtomic(filepath.Join(tmp, safetensors.IndexFileName), append(idx, '\n')); err != nil {
			return rep, err
		}
	}
	if err := writeQuantizedConfig(srcDir, tmp, p); err != nil {
		return rep, err
	}
	if err := copyOtherFiles(srcDir, tmp); err != nil {
		return rep, err
	}
	if err := os.Rename(tmp, dstDir); err != nil {
		return rep, fmt.Errorf("inference: quantize: %w", err)
	}
	// A file system that cannot sync folders (os.ErrInvalid) still has the rename.
	if err := atomicfile.SyncDir(filepath.Dir(filepath.Clean(dstDir))); err != nil {
		return rep, fmt.Errorf("inference: quantize: sync %s: %w", filepath.Dir(dstDir), err)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// planShards groups the tensors to write into shards of at most maxShardBytes,
// dropping what mlx-lm drops: rotary inv_freq buffers and the lm_head of a tied model.
func planShards(set *safetensors.Set, modules map[string]int, tied bool, p QuantParams) ([][]string, error) {
	var plan [][]string
	var cur []string
	var size int64
	for _, name := range set.Names() {
		if strings.HasSuffix(name, "rotary_emb.inv_freq") || (tied && name == "lm_head.weight") {
			continue
		}
		info, _ := set.Info(name)
		n := info.End - info.Begin
		if in, ok := modules[name]; ok {
			if len(info.Shape) != 2 || info.Shape[1] != in {
				return nil, fmt.Errorf("%w: %s has shape %v, want (*, %d)", ErrTensorShape, name, info.Shape, in)
			}
			out, groups := int64(info.Shape[0]), int64(in/p.GroupSize)
			n = out*int64(quant.PackedLen(in, p.Bits))*4 + 2*out*groups*int64(scaleDType(info.DType).Size())
		}
		if len(cur) > 0 && size+n > maxShardBytes {
			plan, cur, size = append(plan, cur), nil, 0
		}
		cur, size = append(cur, name), size+n
	}
	if len(cur) > 0 {
		plan = append(plan, cur)
	}
	return plan, nil
}

// scaleDType is the dtype scales and biases are stored in: the weight's, F32 for F64.
func scaleDType(dt safetensors.DType) safetensors.DType {
	if dt == safetensors.DTypeF16 || dt == safetensors.DTypeBF16 {
		return dt
	}
	return safetensors.DTypeF32
}

// quantizeTensor returns the tensors to write for one source tensor: the packed
// weight, scales and biases of a quantized module, or the tensor unchanged.
func quantizeTensor(set *safetensors.Set, name string, modules map[string]int, p QuantParams, k quant.Kernel) ([]safetensors.Tensor, error) {
	info, _ := set.Info(name)
	raw, err := set.Data(name)
	if err != nil {
		return nil, fmt.Errorf("inference: quantize: %w", err)
	}
	in, ok := modules[name]
	if !ok {
		return []safetensors.Tensor{{Name: name, DType: info.DType, Shape: info.Shape, Data: raw}}, nil
	}
	w, err := safetensors.Float32s(info.DType, raw)
	if err != nil {
		return nil, fmt.Errorf("inference: quantize %s: %w", name, err)
	}
	sdt := scaleDType(info.DType)
	var round quant.Rounding
	switch sdt {
	case safetensors.DTypeBF16:
		round = quant.RoundBF16
	case safetensors.DTypeF16:
		round = quant.RoundF16
	}
	rows := info.Shape[0]
	packed, scales, biases, err := quant.QuantizeWith(k, w, rows, in, p.GroupSize, p.Bits, round)
	if err != nil {
		return nil, fmt.Errorf("inference: quantize %s: %w", name, err)
	}
	words := make([]byte, 4*len(packed))
	for i, v := range packed {
		words[4*i], words[4*i+1], words[4*i+2], words[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	sb, err := safetensors.EncodeFloat32s(sdt, scales)
	if err != nil {
		return nil, err
	}
	bb, err := safetensors.EncodeFloat32s(sdt, biases)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(name, ".weight")
	g := []int{rows, in / p.GroupSize}
	return []safetensors.Tensor{
		{Name: base + ".weight", DType: safetensors.DTypeU32, Shape: []int{rows, quant.PackedLen(in, p.Bits)}, Data: words},
		{Name: base + ".scales", DType: sdt, Shape: g, Data: sb},
		{Name: base + ".biases", DType: sdt, Shape: g, Data: bb},
	}, nil
}

// writeQuantizedConfig copies config.json with the quantization blocks added, every
// other field (and its number formatting) kept.
func writeQuantizedConfig(srcDir, dstDir string, p QuantParams) error {
	data, err := readCapped(filepath.Join(srcDir, "config.json"), maxConfigBytes)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("inference: quantize: config.json: %w", err)
	}
	q := map[string]any{"group_size": p.GroupSize, "bits": p.Bits, "mode": "affine"}
	raw["quantization"], raw["quantization_config"] = q, q
	out, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dstDir, "config.json"), append(out, '\n'))
}

// copyOtherFiles copies every regular file of srcDir except weights and config.json
// (tokenizer.json, tokenizer_config.json, generation_config.json, chat templates ...).
func copyOtherFiles(srcDir, dstDir string) error {
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return fmt.Errorf("inference: quantize: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".safetensors") ||
			slices.Contains([]string{"config.json", safetensors.IndexFileName}, name) {
			continue
		}
		if err := copyFile(filepath.Join(srcDir, name), filepath.Join(dstDir, name)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	if err := atomicfile.CopyFile(src, dst); err != nil {
		return fmt.Errorf("inference: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("inference: %w", err)
	}
	return nil
}

// readCapped reads a small file (a config) whole, refusing one over limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	data, err := capped.ReadFile(path, limit)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	return data, nil
}
