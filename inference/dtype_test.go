package inference

import (
	"path/filepath"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// --dtype: float32 (the default) and the half types cast every float tensor,
// quantized scales and biases included; auto keeps the checkpoint's own.
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
			if a.DType() != mx.Uint32 && a.DType() != tc.want {
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
