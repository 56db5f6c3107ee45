package inference

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// --dtype: float32 (the default) and the half types cast every float tensor,
// quantized scales and biases included; auto keeps the checkpoint's own. The one
// exception is float32 over a 16-bit checkpoint on the cpu backend, which keeps the
// weight matrices compact (TestCompactWeights).
func TestLoadDType(t *testing.T) {
	b := cpu(t)
	for _, tc := range []struct {
		flag, folder string
		want         mx.DType
	}{
		{"", "llama3-bf16", mx.Float32},
		{"float32", "llama3-bf16", mx.Float32},
		{"auto", "llama3-bf16", mx.BFloat16},
		{"auto", "llama-f32", mx.Float32},
		{"bfloat16", "llama-f32", mx.BFloat16},
		{"float16", "llama-f32", mx.Float16},
		{"bfloat16", "qwen3-q4", mx.BFloat16},
		{"auto", "qwen3-q4", mx.Float32},
	} {
		opts, err := ParseDType(tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		if tc.flag != "" && opts.String() != tc.flag {
			t.Errorf("ParseDType(%q).String() = %q", tc.flag, opts.String())
		}
		m, err := LoadWithOptions(filepath.Join("testdata", "models", tc.folder), b, opts)
		if err != nil {
			t.Fatalf("%s --dtype %s: %v", tc.folder, tc.flag, err)
		}
		for name, a := range m.Params() {
			want := tc.want
			if (tc.flag == "" || tc.flag == "float32") && keptCompact(name, a.Ndim(), m.cfg.Quantization, b) {
				want = mx.BFloat16
			}
			if a.DType() != mx.Uint32 && a.DType() != want {
				t.Errorf("%s --dtype %q: %s is %s, want %s", tc.folder, tc.flag, name, a.DType(), tc.want)
			}
		}
		ids, _ := m.Tokens(parityTokens...)
		logits := m.Forward(ids, nil)
		if logits.DType() != tc.want {
			t.Errorf("%s --dtype %q: logits are %s, want %s", tc.folder, tc.flag, logits.DType(), tc.want)
		}
		// Half types round every activation; the logits stay near the float64 reference.
		g := readGolden(t, tc.folder)
		if d := maxAbsDiff(floats(t, logits), g.Logits); d > 0.25 {
			t.Errorf("%s --dtype %q: max |Δ| from the reference = %g", tc.folder, tc.flag, d)
		}
	}
	if _, err := ParseDType("fp8"); err == nil {
		t.Error("ParseDType accepted fp8")
	}
}

// ParamCount counts as mlx-lm's get_total_parameters: a quantized copy has as many
// parameters as the dense model it was made from, whatever its packing.
func TestParamCountAsMlxLM(t *testing.T) {
	b := cpu(t)
	for _, pair := range [][2]string{{"qwen3-f32", "qwen3-q4"}, {"llama-f32", "llama-q8"}} {
		dense, err := Load(filepath.Join("testdata", "models", pair[0]), b)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, a := range dense.Params() {
			sum += int64(a.Size())
		}
		if got := dense.ParamCount(); got != sum {
			t.Errorf("%s: ParamCount %d, want the %d values it holds", pair[0], got, sum)
		}
		q, err := Load(filepath.Join("testdata", "models", pair[1]), b)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.ParamCount(); got != sum {
			t.Errorf("%s: ParamCount %d, want %d (the dense count)", pair[1], got, sum)
		}
	}
}

// A 16-bit checkpoint loaded as float32 on the cpu backend keeps its weight matrices
// (and a quantized one its scales and biases) compact, and computes what the widened
// float32 weights compute: the same logits and decode steps, and the same gradients
// through every product's backward pass, up to float32 rounding. The norms and the
// activations stay float32.
func TestCompactWeights(t *testing.T) {
	b := cpu(t)
	mx.SetDefault(b)
	q4 := filepath.Join(t.TempDir(), "qwen3-bf16-q4")
	if _, err := QuantizeModelWith(filepath.Join("testdata", "models", "qwen3-bf16"), q4, QuantizeOptions{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join("testdata", "mlxlm", "mixed_3_6") // 3-, 4- and 6-bit layers
	for _, dir := range []string{filepath.Join("testdata", "models", "llama3-bf16"), filepath.Join("testdata", "models", "qwen3-bf16"), q4, mixed} {
		folder := filepath.Base(dir)
		compact, err := Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		wide, err := LoadWithOptions(dir, b, LoadOptions{WidenWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		matrices := 0
		for name, a := range compact.Params() {
			if a.DType() == mx.Uint32 { // a quantized matrix's packed words
				continue
			}
			want := mx.Float32
			if keptCompact(name, a.Ndim(), compact.cfg.Quantization, b) {
				want, matrices = mx.BFloat16, matrices+1
			}
			if a.DType() != want {
				t.Errorf("%s: %s is %s, want %s", folder, name, a.DType(), want)
			}
			if w := wide.Params()[name]; w.DType() != mx.Float32 {
				t.Errorf("%s widened: %s is %s", folder, name, w.DType())
			}
		}
		if matrices == 0 && dir != mixed {
			t.Fatalf("%s: no weight matrix kept compact", folder)
		}
		// Scales stay compact only where the decode kernels read them at that width:
		// a 4-bit model's on a machine whose kernels do, never 3- or 6-bit layers'.
		if mx.ReadsCompactScales(b, 4) {
			for _, c := range []struct {
				dir, name string
				want      mx.DType
			}{
				{q4, "model.layers.0.self_attn.q_proj.scales", mx.BFloat16},
				{mixed, "model.embed_tokens.scales", mx.Float32},              // 3 bits
				{mixed, "model.layers.2.mlp.down_proj.biases", mx.Float32},    // 6 bits
				{mixed, "model.layers.0.self_attn.q_proj.scales", mx.Float32}, // 3 bits
			} {
				if c.dir != dir {
					continue
				}
				if got := compact.Params()[c.name].DType(); got != c.want {
					t.Errorf("%s: %s is %s, want %s", folder, c.name, got, c.want)
				}
			}
		}
		near := func(what string, got, want *mx.Array) {
			t.Helper()
			g, w := floats(t, got), floats(t, want)
			spread := 0.0
			for _, v := range w {
				spread = max(spread, math.Abs(float64(v)))
			}
			if got.DType() != mx.Float32 {
				t.Errorf("%s %s: %s, want float32", folder, what, got.DType())
			}
			if d := maxAbsDiff(g, w); d > 1e-5*spread {
				t.Errorf("%s %s: max |Δ| %g over values up to %g", folder, what, d, spread)
			}
		}
		ids, _ := compact.Tokens(parityTokens...)
		near("logits", compact.Forward(ids, nil), wide.Forward(ids, nil))

		// Prefill, then decode one token at a time (the one-row kernel).
		seq := tokenSeq(12, compact.cfg.VocabSize, 4)
		sc, sw := NewSession(compact), NewSession(wide)
		lc, _, err := sc.Prefill(seq[:6])
		if err != nil {
			t.Fatal(err)
		}
		lw, _, _ := sw.Prefill(seq[:6])
		near("prefill", lc, lw)
		for _, tok := range seq[6:] {
			lc, _, err = sc.Prefill([]int{tok})
			if err != nil {
				t.Fatal(err)
			}
			lw, _, _ = sw.Prefill([]int{tok})
			near("decode step", lc, lw)
		}

		// Gradients with respect to norm weights pass back through every product.
		names := []string{"model.norm.weight", "model.layers.0.input_layernorm.weight"}
		grads := func(m *Model) []*mx.Array {
			targets := mx.FromData(b, mx.Int32, []int32{3, 1, 4, 1, 5, 9, 2, 6}, 1, 8)
			x, _ := m.Tokens(seq[:8])
			params := []*mx.Array{m.Params()[names[0]], m.Params()[names[1]]}
			_, g, err := mx.ValueAndGrad(func(ps []*mx.Array) []*mx.Array {
				mm, err := m.WithParams(map[string]*mx.Array{names[0]: ps[0], names[1]: ps[1]})
				if err != nil {
					return []*mx.Array{mx.Errorf("%v", err)}
				}
				return []*mx.Array{mx.Mean(mx.CrossEntropy(mm.Forward(x, nil), targets), nil, false)}
			}, params)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		gc, gw := grads(compact), grads(wide)
		for i := range names {
			near("gradient of "+names[i], gc[i], gw[i])
		}

		// Saved, a compact model writes its checkpoint's bfloat16 matrices back bit
		// for bit, and loads compact again.
		saved := t.TempDir()
		if err := SaveModel(compact, saved); err != nil {
			t.Fatal(err)
		}
		back, err := Load(saved, b)
		if err != nil {
			t.Fatal(err)
		}
		for name, a := range compact.Params() {
			r := back.Params()[name]
			if a.DType() == mx.Uint32 {
				rw, _ := r.Uint32s()
				aw, _ := a.Uint32s()
				if !slices.Equal(rw, aw) {
					t.Errorf("%s: packed words changed by saving and loading again", name)
				}
				continue
			}
			if r.DType() != a.DType() || maxAbsDiff(floats(t, r), floats(t, a)) != 0 {
				t.Errorf("%s: %s after saving and loading again, %s before, or other values", name, r.DType(), a.DType())
			}
		}
	}
}
