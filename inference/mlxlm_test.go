package inference

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/mlx"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Parity with mlx-lm itself. testdata/mlxlm holds what mlx-lm 0.31.3 on MLX 0.31.2
// (a CPU build) computed and wrote (mlxlm_goldens.py): the logits of the parity
// fixtures and of tiny random bases, in float32 and bfloat16; the config block and
// a hash of every tensor of the folders mlx_lm.convert -q writes from those bases,
// uniform and with each mixed_* recipe; and one such folder whole (mixed_3_6).
// The bases are not stored: NewRandom makes the same weights everywhere.
//
// On the cpu backend float32 logits agree to cpuLogitTolerance and bfloat16 ones to
// bf16 rounding; on the mlx backend, whenever libmlxc loads, both must be exact.
//
//	go test ./inference -run TestMlxLM -mlxlm-bases /tmp/bases   # then run the script

var mlxlmBasesDir = flag.String("mlxlm-bases", "", "write the base folders testdata/mlxlm/mlxlm_goldens.py quantizes into this folder, and stop")

const (
	// cpuLogitTolerance bounds |cpu − mlx-lm| on float32 logits (of magnitude up to
	// ~10): the same float32 arithmetic summed in another order (OpenBLAS, our
	// kernels) over a few layers.
	cpuLogitTolerance = 1.5e-4
	// cpuBF16Relative bounds it in bfloat16, relative to the largest logit: the cpu
	// backend computes each op in float32 and rounds its result once, MLX rounds
	// some intermediates too, so the two differ by a few ulps of bfloat16 (2⁻⁸
	// relative) compounded over the layers. Measured up to 1.4% (0.5 on logits of
	// 36, two ulps there).
	cpuBF16Relative = 0.03
)

// mlxlmBase is a tiny random model the goldens quantize.
type mlxlmBase struct {
	name  string
	cfg   func() Config
	seed  uint64
	dtype mx.DType
}

func mlxlmBaseModels() []mlxlmBase {
	qwen := func() Config {
		c := tinyConfig("qwen3")
		c.HiddenSize, c.IntermediateSize, c.RopeTheta = 64, 128, 1e6
		return c
	}
	return []mlxlmBase{
		{"llama-f32", mixedConfig, 2026, mx.Float32},
		{"llama-bf16", mixedConfig, 2026, mx.BFloat16}, // the same weights, rounded
		{"qwen3-bf16", qwen, 2027, mx.BFloat16},        // tied embeddings
	}
}

func writeMlxLMBase(t testing.TB, b mlxlmBase, dir string) {
	t.Helper()
	cfg := b.cfg()
	cfg.TorchDType = b.dtype.String()
	m := NewRandom(cfg, b.seed, cpu(t))
	if b.dtype != mx.Float32 {
		m.slots(func(_ string, slot **mx.Array) { *slot = mx.AsType(*slot, b.dtype) })
	}
	if err := SaveModel(m, dir); err != nil {
		t.Fatal(err)
	}
}

// mlxlmFolders makes each base once per test binary.
var mlxlmFolders struct {
	sync.Mutex
	dir string
}

func mlxlmBaseDir(t *testing.T, name string) string {
	t.Helper()
	mlxlmFolders.Lock()
	defer mlxlmFolders.Unlock()
	if mlxlmFolders.dir == "" {
		d, err := os.MkdirTemp("", "inloop-mlxlm-bases-")
		if err != nil {
			t.Fatal(err)
		}
		mlxlmFolders.dir = d
	}
	dir := filepath.Join(mlxlmFolders.dir, name)
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	for _, b := range mlxlmBaseModels() {
		if b.name == name {
			writeMlxLMBase(t, b, dir)
			return dir
		}
	}
	t.Fatalf("no base %q", name)
	return ""
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The mlx backend is linked in for the MLX-exact checks; every other test here
	// makes arrays on the default backend, and that stays cpu even where libmlxc
	// loads (auto would pick mlx and mix the two).
	if b, err := mx.Open("cpu"); err == nil {
		mx.SetDefault(b)
	}
	code := m.Run()
	if mlxlmFolders.dir != "" {
		os.RemoveAll(mlxlmFolders.dir)
	}
	os.Exit(code)
}

// quantGolden is quantized/<case>.json: what mlx-lm wrote.
type quantGolden struct {
	Case         string                       `json:"case"`
	Quantization json.RawMessage              `json:"quantization"`
	Tensors      map[string]tensorFingerprint `json:"tensors"`
}

type tensorFingerprint struct {
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	SHA256 string `json:"sha256"`
}

func readQuantGolden(t *testing.T, name string) quantGolden {
	t.Helper()
	var g quantGolden
	data, err := os.ReadFile(filepath.Join("testdata", "mlxlm", "quantized", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// baseOf names the base a quantized case was made from.
func baseOf(c string) string {
	if c == "mixed_3_6" {
		return "llama-bf16"
	}
	for _, b := range mlxlmBaseModels() {
		if strings.HasPrefix(c, b.name+"-") {
			return b.name
		}
	}
	return ""
}

// folderFingerprints hashes every tensor of a model folder as the goldens do.
func folderFingerprints(t *testing.T, dir string) map[string]tensorFingerprint {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	names := map[safetensors.DType]string{safetensors.DTypeF32: "float32", safetensors.DTypeBF16: "bfloat16",
		safetensors.DTypeF16: "float16", safetensors.DTypeU32: "uint32"}
	out := map[string]tensorFingerprint{}
	for _, n := range set.Names() {
		info, _ := set.Info(n)
		raw, err := set.Data(n)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		out[n] = tensorFingerprint{DType: names[info.DType], Shape: info.Shape, SHA256: hex.EncodeToString(sum[:])}
	}
	return out
}

// quantizedFolder makes, from the regenerated base, the folder mlx-lm wrote for
// case c, in Inloop: with QuantizeModelWith and the CPU kernel for a uniform
// block (what `inloop quantize --kernel cpu` does), or module by module with the
// CPU kernel as the mixed block says. Every tensor must be the one mlx-lm wrote.
func quantizedFolder(t *testing.T, c string) string {
	t.Helper()
	if c == "mixed_3_6" {
		return filepath.Join("testdata", "mlxlm", "mixed_3_6")
	}
	g := readQuantGolden(t, c)
	base := mlxlmBaseDir(t, baseOf(c))
	var q Quantization
	if err := json.Unmarshal(g.Quantization, &q); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), c)
	if len(q.Overrides) == 0 {
		if _, err := QuantizeModelWith(base, dir, QuantizeOptions{Bits: q.Bits, GroupSize: q.GroupSize, Kernel: quant.CPU}); err != nil {
			t.Fatal(err)
		}
		var written map[string]json.RawMessage
		data, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		json.Unmarshal(data, &written)
		if !jsonEqual(t, written["quantization"], g.Quantization) {
			t.Errorf("%s: config.json quantization %s, mlx-lm wrote %s", c, written["quantization"], g.Quantization)
		}
	} else {
		m, err := LoadWithOptions(base, cpu(t), LoadOptions{KeepDType: true})
		if err != nil {
			t.Fatal(err)
		}
		quantizeModulesCPU(t, m, &q)
		if err := SaveModelFrom(m, base, dir); err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		data, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		json.Unmarshal(data, &raw)
		raw["quantization"], raw["quantization_config"] = g.Quantization, g.Quantization
		out, _ := json.Marshal(raw)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// quantizeModulesCPU quantizes exactly the modules q lists, with MLX's CPU kernel.
func quantizeModulesCPU(t *testing.T, m *Model, q *Quantization) {
	t.Helper()
	do := func(w *mx.Array, p QuantParams) (*mx.Array, *mx.Array, *mx.Array) {
		v, err := w.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := w.Dim(0), w.Dim(1)
		var round quant.Rounding
		if w.DType() == mx.BFloat16 {
			round = quant.RoundBF16
		}
		pk, s, b, err := quant.QuantizeWith(quant.CPU, v, rows, cols, p.GroupSize, p.Bits, round)
		if err != nil {
			t.Fatal(err)
		}
		be := w.Backend()
		return mx.FromData(be, mx.Uint32, pk, rows, quant.PackedLen(cols, p.Bits)),
			mx.FromData(be, w.DType(), s, rows, cols/p.GroupSize), mx.FromData(be, w.DType(), b, rows, cols/p.GroupSize)
	}
	m.forEachModule(func(path string, mod any) error {
		p := q.Overrides[path]
		if p == nil {
			return nil
		}
		switch mod := mod.(type) {
		case *Linear:
			mod.Weight, mod.Scales, mod.Biases = do(mod.Weight, *p)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
		case *Embedding:
			mod.Weight, mod.Scales, mod.Biases = do(mod.Weight, *p)
			mod.GroupSize, mod.Bits = p.GroupSize, p.Bits
		}
		return nil
	})
	m.cfg.Quantization = q
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestMlxLMQuantizedFolders: Inloop writes, tensor for tensor, the folders
// mlx_lm.convert -q writes on Linux MLX (the CPU kernel), uniform and mixed, and
// loads mlx-lm's own mixed_3_6 folder with each module's bits as mlx-lm reads them.
func TestMlxLMQuantizedFolders(t *testing.T) {
	if *mlxlmBasesDir != "" {
		for _, b := range mlxlmBaseModels() {
			writeMlxLMBase(t, b, filepath.Join(*mlxlmBasesDir, b.name))
		}
		t.Skipf("wrote the bases to %s", *mlxlmBasesDir)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "mlxlm", "quantized", "*.json"))
	if len(files) == 0 {
		t.Fatal("no goldens in testdata/mlxlm/quantized")
	}
	for _, f := range files {
		c := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(c, func(t *testing.T) {
			g := readQuantGolden(t, c)
			dir := quantizedFolder(t, c)
			got := folderFingerprints(t, dir)
			for _, n := range slices.Sorted(func(yield func(string) bool) {
				for n := range g.Tensors {
					if !yield(n) {
						return
					}
				}
			}) {
				w, gt := g.Tensors[n], got[n]
				switch {
				case gt.SHA256 == "":
					t.Errorf("%s: Inloop wrote no tensor mlx-lm wrote", n)
				case gt.DType != w.DType || !slices.Equal(gt.Shape, w.Shape):
					t.Errorf("%s: %s %v, mlx-lm wrote %s %v", n, gt.DType, gt.Shape, w.DType, w.Shape)
				case gt.SHA256 != w.SHA256:
					t.Errorf("%s: bytes differ from mlx-lm's", n)
				}
			}
			if len(got) != len(g.Tensors) {
				t.Errorf("%d tensors, mlx-lm wrote %d", len(got), len(g.Tensors))
			}
			// Loaded, every module has the bits and group size mlx-lm gave it.
			m, err := Load(dir, cpu(t))
			if err != nil {
				t.Fatal(err)
			}
			var q Quantization
			json.Unmarshal(g.Quantization, &q)
			m.forEachModule(func(path string, mod any) error {
				var bits, group int
				switch mod := mod.(type) {
				case *Linear:
					bits, group = mod.Bits, mod.GroupSize
				case *Embedding:
					bits, group = mod.Bits, mod.GroupSize
				}
				if _, stored := g.Tensors[path+".scales"]; stored {
					want, _ := q.For(path)
					if want.GroupSize == 0 { // mlx-lm reads a null group size as 64
						want.GroupSize = defaultGroupSize
					}
					if bits != want.Bits || group != want.GroupSize {
						t.Errorf("%s: loaded %d-bit groups of %d, mlx-lm %d-bit groups of %d", path, bits, group, want.Bits, want.GroupSize)
					}
				} else if bits != 0 {
					t.Errorf("%s: loaded quantized, mlx-lm stored it dense", path)
				}
				return nil
			})
		})
	}
}

// logitsGolden is logits/<case>-<compute>.json.
type logitsGolden struct {
	Case    string `json:"case"`
	Compute string `json:"compute"`
	Shape   []int  `json:"shape"`
	Logits  string `json:"logits_f32le"`
}

func (g logitsGolden) values(t *testing.T) []float32 {
	raw, err := base64.StdEncoding.DecodeString(g.Logits)
	if err != nil || len(raw)%4 != 0 {
		t.Fatalf("%s: logits: %v", g.Case, err)
	}
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}

// mlxlmFolder returns the folder of a logits case.
func mlxlmFolder(t *testing.T, c string) string {
	switch {
	case strings.HasPrefix(c, "fixture-"):
		return filepath.Join("testdata", "models", strings.TrimPrefix(c, "fixture-"))
	case strings.HasPrefix(c, "base-"):
		return mlxlmBaseDir(t, strings.TrimPrefix(c, "base-"))
	}
	return quantizedFolder(t, c)
}

// logitDiff is one case's max |Inloop − mlx-lm| and its largest logit.
type logitDiff struct{ diff, scale float64 }

// mlxlmLogitDiffs computes every logits golden's case on backend b, by
// "case compute".
func mlxlmLogitDiffs(t *testing.T, b mx.Backend) map[string]logitDiff {
	files, _ := filepath.Glob(filepath.Join("testdata", "mlxlm", "logits", "*.json"))
	if len(files) == 0 {
		t.Fatal("no goldens in testdata/mlxlm/logits")
	}
	diffs := map[string]logitDiff{}
	for _, f := range files {
		var g logitsGolden
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		opts := LoadOptions{}
		if g.Compute != "float32" {
			opts.KeepDType = true
		}
		m, err := LoadWithOptions(mlxlmFolder(t, g.Case), b, opts)
		if err != nil {
			t.Fatalf("%s: %v", g.Case, err)
		}
		ids, err := m.Tokens(parityTokens...)
		if err != nil {
			t.Fatal(err)
		}
		logits := m.Forward(ids, nil)
		if want := map[string]mx.DType{"float32": mx.Float32, "bfloat16": mx.BFloat16}[g.Compute]; logits.DType() != want {
			t.Errorf("%s in %s: logits are %s", g.Case, g.Compute, logits.DType())
		}
		if !slices.Equal(logits.Shape(), g.Shape) {
			t.Fatalf("%s: logits %v, mlx-lm %v", g.Case, logits.Shape(), g.Shape)
		}
		want := g.values(t)
		diffs[g.Case+" "+g.Compute] = logitDiff{maxAbsDiff(floats(t, logits), want), maxAbs(want)}
	}
	return diffs
}

func TestMlxLMLogitsCPU(t *testing.T) {
	if *mlxlmBasesDir != "" {
		t.Skip("writing bases")
	}
	diffs := mlxlmLogitDiffs(t, cpu(t))
	for _, c := range slices.Sorted(maps.Keys(diffs)) {
		d := diffs[c]
		tol := cpuLogitTolerance
		if strings.HasSuffix(c, "bfloat16") {
			tol = cpuBF16Relative * d.scale
		}
		t.Logf("cpu  %-30s max |Inloop − mlx-lm| = %-9.3g (largest logit %.3g)", c, d.diff, d.scale)
		if d.diff > tol {
			t.Errorf("%s: max |Δ| = %g, want ≤ %g", c, d.diff, tol)
		}
	}
}

// TestMlxLMLogitsMLX: on MLX the logits are mlx-lm's exactly, float32 and bfloat16.
func TestMlxLMLogitsMLX(t *testing.T) {
	if *mlxlmBasesDir != "" {
		t.Skip("writing bases")
	}
	b, err := mx.Open("mlx")
	if errors.Is(err, mx.ErrUnavailable) || err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	t.Log(b.Name())
	diffs := mlxlmLogitDiffs(t, b)
	for _, c := range slices.Sorted(maps.Keys(diffs)) {
		d := diffs[c]
		t.Logf("mlx  %-30s max |Inloop − mlx-lm| = %-9.3g (largest logit %.3g)", c, d.diff, d.scale)
		if d.diff != 0 {
			t.Errorf("%s: max |Δ| = %g, want 0 (the same MLX computes both)", c, d.diff)
		}
	}
}

// TestMlxLMFuse: fusing mlx-lm's adapter into the bfloat16 base and into its 4-bit
// copy writes the tensors mlx_lm.fuse writes, bit for bit (the 4-bit one with the
// CPU kernel's rounding, as MLX on Linux re-quantizes), on every backend here.
func TestMlxLMFuse(t *testing.T) {
	if *mlxlmBasesDir != "" {
		t.Skip("writing bases")
	}
	backends := []mx.Backend{cpu(t)}
	if b, err := mx.Open("mlx"); err == nil {
		backends = append(backends, b)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "mlxlm", "fused", "*.json"))
	if len(files) == 0 {
		t.Fatal("no goldens in testdata/mlxlm/fused")
	}
	for _, f := range files {
		c := strings.TrimSuffix(filepath.Base(f), ".json")
		var g quantGolden
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		base := mlxlmBaseDir(t, "llama-bf16")
		if c != "llama-bf16" {
			base = quantizedFolder(t, c)
		}
		for _, b := range backends {
			m, err := LoadWithOptions(base, b, LoadOptions{KeepDType: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := LoadAdapter(m, filepath.Join("testdata", "mlxlm", "adapter")); err != nil {
				t.Fatal(err)
			}
			if _, err := m.FuseAdaptersWith(FuseOptions{Kernel: quant.CPU}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "fused")
			if err := SaveModelFrom(m, base, dir); err != nil {
				t.Fatal(err)
			}
			got := folderFingerprints(t, dir)
			same := 0
			for n, w := range g.Tensors {
				if gt := got[n]; gt.SHA256 == w.SHA256 && gt.DType == w.DType && slices.Equal(gt.Shape, w.Shape) {
					same++
				} else {
					t.Errorf("%s on %s: %s is %+v, mlx-lm wrote %+v", c, b.Name(), n, got[n], w)
				}
			}
			if len(got) != len(g.Tensors) {
				t.Errorf("%s on %s: %d tensors, mlx-lm wrote %d", c, b.Name(), len(got), len(g.Tensors))
			}
			t.Logf("%s on %s: %d of %d tensors identical to mlx_lm.fuse's", c, b.Name(), same, len(g.Tensors))
		}
	}
}
