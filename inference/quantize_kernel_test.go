package inference

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/inloop/inloop/internal/atomicfile"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// QuantizeModelWith writes the rounding of the MLX kernel asked for: the two kernels
// disagree on groups whose values are all negative, and each folder holds exactly
// what quant.QuantizeWith gives for its kernel.
func TestQuantizeKernelChoice(t *testing.T) {
	b := cpu(t)
	cfg := mixedConfig()
	m := NewRandom(cfg, 5, b)
	// Rows of the embedding with only negative values: the GPU kernel quantizes
	// them over [min, 0], the CPU one over [min, max].
	emb, err := m.Embed.Weight.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * cfg.HiddenSize {
		emb[i] = -0.1 - abs32(emb[i])
	}
	m.Embed.Weight = mx.FromData(b, mx.Float32, emb, cfg.VocabSize, cfg.HiddenSize)
	src := t.TempDir()
	if err := SaveModel(m, src); err != nil {
		t.Fatal(err)
	}
	words := map[quant.Kernel][]byte{}
	for _, k := range []quant.Kernel{quant.GPU, quant.CPU} {
		dst := filepath.Join(t.TempDir(), "q-"+k.String())
		rep, err := QuantizeModelWith(src, dst, QuantizeOptions{Bits: 4, GroupSize: 64, Kernel: k})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Kernel != k {
			t.Errorf("report says kernel %v, want %v", rep.Kernel, k)
		}
		set, err := safetensors.OpenDir(dst)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := set.Data("model.embed_tokens.weight")
		if err != nil {
			t.Fatal(err)
		}
		raw = bytes.Clone(raw) // the set's bytes are mapped until Close
		set.Close()
		words[k] = raw
		packed, _, _, err := quant.QuantizeWith(k, emb, cfg.VocabSize, cfg.HiddenSize, 64, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4*len(packed))
		for i, w := range packed {
			binary.LittleEndian.PutUint32(want[4*i:], w)
		}
		if !bytes.Equal(raw, want) {
			t.Errorf("%v kernel: the folder's packed embedding differs from quant.QuantizeWith(%v)", k, k)
		}
		if _, err := Load(dst, b); err != nil {
			t.Errorf("%v kernel: %v", k, err)
		}
	}
	if bytes.Equal(words[quant.GPU], words[quant.CPU]) {
		t.Error("the GPU and CPU kernels wrote the same words for all-negative rows")
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// Every file of a quantized folder has the same, normal permissions, and so has
// the folder itself (assembled in a temporary folder, which os.MkdirTemp makes 0700).
func TestQuantizeFolderPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	m := NewRandom(mixedConfig(), 3, cpu(t))
	src := t.TempDir()
	if err := SaveModel(m, src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "q")
	if _, err := QuantizeModel(src, dst, 8, 64); err != nil {
		t.Fatal(err)
	}
	assertNormalPermissions(t, dst)
}

// assertNormalPermissions checks dir and everything in it against atomicfile's
// Perm and DirPerm.
func assertNormalPermissions(t *testing.T, dir string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		want := atomicfile.Perm
		if d.IsDir() {
			want = atomicfile.DirPerm
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
		n++
		return nil
	})
	if n < 3 {
		t.Errorf("only %d entries in %s", n, dir)
	}
}
