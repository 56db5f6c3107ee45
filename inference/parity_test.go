package inference

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Parity with an independent implementation: testdata/reference.py (NumPy, float64)
// computes the logits of tiny random checkpoints in testdata/models, written by this
// file with -update-fixtures:
//
//	go test ./inference -run TestParity -update-fixtures
//
// which writes the checkpoints and then runs the reference to refresh the goldens.

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite testdata/models and the reference goldens")

// parityTolerance bounds |Go − reference| on logits of magnitude up to ~10: float32
// compute against float64 over two layers.
const parityTolerance = 1e-4

type fixture struct {
	name  string
	cfg   func() Config
	dtype mx.DType
	// quantized fixtures are made by QuantizeModel from the named dense one
	from        string
	bits, group int
}

func fixtures() []fixture {
	llama := func() Config {
		c := tinyConfig("llama")
		c.TieWordEmbeddings = false
		return c
	}
	llama3 := func() Config {
		c := tinyConfig("llama")
		// A short original context puts the head's frequencies in all three llama3
		// bands, so positions 0..11 already show the adjustment.
		c.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
		c.RopeTheta = 10000
		return c
	}
	qwen3Untied := func() Config {
		c := tinyConfig("qwen3")
		c.TieWordEmbeddings = false
		c.RopeTheta = 1e6
		return c
	}
	return []fixture{
		{name: "llama-f32", cfg: llama, dtype: mx.Float32},
		{name: "llama3-bf16", cfg: llama3, dtype: mx.BFloat16},
		{name: "qwen2-f32", cfg: func() Config { return tinyConfig("qwen2") }, dtype: mx.Float32},
		{name: "qwen3-f32", cfg: func() Config { return tinyConfig("qwen3") }, dtype: mx.Float32},
		{name: "qwen3-bf16", cfg: qwen3Untied, dtype: mx.BFloat16},
		{name: "llama-q8", from: "llama-f32", bits: 8, group: 32},
		{name: "qwen3-q4", from: "qwen3-f32", bits: 4, group: 32},
	}
}

// parityTokens are the two rows every golden is computed on.
var parityTokens = [][]int{
	{1, 17, 42, 96, 0, 5, 5, 63, 28, 77, 11, 50},
	{90, 3, 3, 3, 71, 24, 8, 59, 13, 88, 36, 2},
}

func writeFixtures(t *testing.T) {
	b := cpu(t)
	dir := filepath.Join("testdata", "models")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i, f := range fixtures() {
		out := filepath.Join(dir, f.name)
		if f.from != "" {
			if _, err := QuantizeModel(filepath.Join(dir, f.from), out, f.bits, f.group); err != nil {
				t.Fatal(err)
			}
			continue
		}
		cfg := f.cfg()
		cfg.TorchDType = map[mx.DType]string{mx.Float32: "float32", mx.BFloat16: "bfloat16"}[f.dtype]
		m := NewRandom(cfg, uint64(100+i), b)
		if f.dtype != mx.Float32 {
			m.slots(func(_ string, slot **mx.Array) { *slot = mx.AsType(*slot, f.dtype) })
		}
		if err := SaveModel(m, out); err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := json.Marshal(parityTokens)
	if err := os.MkdirAll(filepath.Join("testdata", "goldens"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "goldens", "tokens.json"), append(tok, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", filepath.Join("testdata", "reference.py"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("reference.py: %v", err)
	}
}

type golden struct {
	Shape  []int     `json:"shape"`
	Logits []float32 `json:"logits"`
}

func readGolden(t *testing.T, name string) golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "goldens", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParityWithReference(t *testing.T) {
	if *updateFixtures {
		writeFixtures(t)
	}
	b := cpu(t)
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			m, err := Load(filepath.Join("testdata", "models", f.name), b)
			if err != nil {
				t.Fatal(err)
			}
			if w := m.Warnings(); len(w) > 0 {
				t.Errorf("warnings: %v", w)
			}
			g := readGolden(t, f.name)
			ids, err := m.Tokens(parityTokens...)
			if err != nil {
				t.Fatal(err)
			}
			got := floats(t, m.Forward(ids, nil))
			d := maxAbsDiff(got, g.Logits)
			t.Logf("max |Go − reference| = %.2g over %d logits", d, len(got))
			if d > parityTolerance {
				t.Errorf("max |Δ| = %g, want ≤ %g", d, parityTolerance)
			}

			// The same through the cache, one token at a time after a 3-token prefill.
			c := NewCache(m)
			V := m.Config().VocabSize
			L := len(parityTokens[0])
			pre, _ := m.Tokens(parityTokens[0][:3], parityTokens[1][:3])
			m.Forward(pre, c)
			for p := 3; p < L; p++ {
				step, _ := m.Tokens(parityTokens[0][p:p+1], parityTokens[1][p:p+1])
				row := floats(t, m.ForwardLast(step, c))
				for r := 0; r < 2; r++ {
					want := g.Logits[(r*L+p)*V : (r*L+p+1)*V]
					if d := maxAbsDiff(row[r*V:(r+1)*V], want); d > parityTolerance {
						t.Errorf("cached decode, row %d position %d: max |Δ| = %g", r, p, d)
					}
				}
			}
		})
	}
}

// Keeping bf16 weights in bf16 rounds every activation to 8 bits of mantissa, as
// mlx-lm does on a Mac; the logits then agree with the float64 reference only to
// bf16 precision.
func TestParityKeepDType(t *testing.T) {
	b := cpu(t)
	for _, name := range []string{"llama3-bf16", "qwen3-bf16"} {
		m, err := LoadWithOptions(filepath.Join("testdata", "models", name), b, LoadOptions{KeepDType: true})
		if err != nil {
			t.Fatal(err)
		}
		if dt := m.Params()["model.norm.weight"].DType(); dt != mx.BFloat16 {
			t.Fatalf("%s: weights loaded as %s, want bfloat16", name, dt)
		}
		ids, _ := m.Tokens(parityTokens...)
		logits := m.Forward(ids, nil)
		if logits.DType() != mx.BFloat16 {
			t.Errorf("%s: logits are %s, want bfloat16", name, logits.DType())
		}
		g := readGolden(t, name)
		d := maxAbsDiff(floats(t, logits), g.Logits)
		t.Logf("%s kept in bf16: max |Δ| = %.2g", name, d)
		if d > 0.25 {
			t.Errorf("%s: max |Δ| = %g, want ≤ 0.25", name, d)
		}
	}
}
