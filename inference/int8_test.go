package inference_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	mx "github.com/inloop/inloop/mlxbridge"
)

// quantizedDemo is the demo model quantized to bits (group 64), loaded on the cpu
// backend, with the held-out text of heldOut.
func quantizedDemo(t testing.TB, bits int) (*inference.Model, []int) {
	t.Helper()
	m, _ := inferencetest.Load(t, quantizedDemoDir(t, bits))
	_, ids := heldOut(t)
	return m, ids
}

// quantizedDemoDir is the folder of the demo model quantized to bits (group 64).
func quantizedDemoDir(t testing.TB, bits int) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), fmt.Sprintf("demo-q%d", bits))
	if _, err := inference.QuantizeModel(inferencetest.Demo(t), dst, bits, 64); err != nil {
		t.Fatal(err)
	}
	return dst
}

func logits(t testing.TB, f func() ([]float32, error)) []float32 {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestInt8Decode: with SetInt8Decode a forward pass over many positions gives the
// exact logits bit for bit (many rows: the exact kernels), and each decode step
// logits within 4% of their
// spread of the exact ones (on the 4- and 8-bit demo, 60 steps of held-out text,
// each step fed the same token on both sides); where the CPU has the integer
// kernels they do differ, so the integer path ran. A copy made before the choice
// (as an open chat's fork is) follows it, another load of the folder does not,
// and turning it off gives the exact logits back.
func TestInt8Decode(t *testing.T) {
	for _, bits := range []int{4, 8} {
		dir := quantizedDemoDir(t, bits)
		m, _ := inferencetest.Load(t, dir)
		_, ids := heldOut(t)
		exact := inference.NewSession(m)
		if _, _, err := exact.Prefill(ids[:8]); err != nil {
			t.Fatal(err)
		}
		base, _ := inferencetest.Load(t, dir)
		m8, err := base.WithParams(nil)
		if err != nil {
			t.Fatal(err)
		}
		base.SetInt8Decode(true)
		if !m8.Int8Decode() || m.Int8Decode() {
			t.Fatalf("%d-bit: Int8Decode of a copy made before the choice %v, of another load %v; want true, false", bits, m8.Int8Decode(), m.Int8Decode())
		}
		// Many rows at once (a whole sequence's logits) take the exact kernels.
		tokens, err := m.Tokens(ids[:24])
		if err != nil {
			t.Fatal(err)
		}
		rv, gv := logits(t, m.Forward(tokens, nil).Float32s), logits(t, m8.Forward(tokens, nil).Float32s)
		for i := range rv {
			if rv[i] != gv[i] {
				t.Fatalf("%d-bit: logit %d of a 24-token forward pass is %g with int8 decoding, %g exact", bits, i, gv[i], rv[i])
			}
		}
		fast := inference.NewSession(m8)
		if _, _, err := fast.Prefill(ids[:8]); err != nil {
			t.Fatal(err)
		}
		var worst, sq float64
		n, differ := 0, false
		for step := 8; step < 68; step++ {
			a, err := exact.Append(ids[step : step+1])
			if err != nil {
				t.Fatal(err)
			}
			b, err := fast.Append(ids[step : step+1])
			if err != nil {
				t.Fatal(err)
			}
			av := logits(t, a.Float32s)
			w, s, d := spreadDiff(av, logits(t, b.Float32s))
			worst, sq, n, differ = math.Max(worst, w), sq+s, n+len(av), differ || d
		}
		t.Logf("%d-bit demo, 60 decode steps: |int8 − exact| %.5f of the logits' spread at worst, %.5f RMS", bits, worst, math.Sqrt(sq/float64(n)))
		if worst > 0.04 {
			t.Errorf("%d-bit: int8 decoding moved a logit by %.4f of the logits' spread", bits, worst)
		}
		if mx.HasQuantizedA8(m.Backend(), bits) && !differ {
			t.Errorf("%d-bit: int8 decoding gave the exact logits on a CPU with the integer kernels: it did not run", bits)
		}
		base.SetInt8Decode(false)
		s := inference.NewSession(m8)
		if _, _, err := s.Prefill(ids[:8]); err != nil {
			t.Fatal(err)
		}
		e2 := inference.NewSession(m)
		if _, _, err := e2.Prefill(ids[:8]); err != nil {
			t.Fatal(err)
		}
		a, _ := e2.Append(ids[8:9])
		b, _ := s.Append(ids[8:9])
		av, bv := logits(t, a.Float32s), logits(t, b.Float32s)
		for i := range av {
			if av[i] != bv[i] {
				t.Fatalf("%d-bit: with int8 decoding off again, logit %d is %g, exact %g", bits, i, bv[i], av[i])
			}
		}
	}
}

// The quality int8 decoding costs: the 4- and 8-bit demo's perplexity on held-out
// text decoded token by token moves by less than 1%.
func TestInt8DecodePerplexity(t *testing.T) {
	for _, bits := range []int{4, 8} {
		m, ids := quantizedDemo(t, bits)
		exact := decodePerplexity(t, m, ids, inference.CacheOptions{})
		m.SetInt8Decode(true)
		ppl := decodePerplexity(t, m, ids, inference.CacheOptions{})
		t.Logf("%d-bit demo, %d tokens: perplexity %.4f exact, %.4f int8 decoding (%+.3f%%)", bits, len(ids), exact, ppl, 100*(ppl/exact-1))
		if d := ppl/exact - 1; math.Abs(d) > 0.01 {
			t.Errorf("%d-bit: int8 decoding's perplexity %.4f against %.4f exact", bits, ppl, exact)
		}
	}
}

// prefillChoice is one of the choices of a prompt on rounded activations: the 4- or
// 8-bit demo with SetInt8Prefill, or the demo's weights kept compact in bfloat16 (what a
// float32 load of a bfloat16 checkpoint gives) with SetBF16Prefill.
type prefillChoice struct {
	name string
	load func(t *testing.T) (*inference.Model, []int)
	set  func(m *inference.Model, on bool)
	get  func(m *inference.Model) bool
	runs func(m *inference.Model) bool // whether the backend has the kernel for the model
}

func prefillChoices() []prefillChoice {
	var cs []prefillChoice
	for _, bits := range []int{4, 8} {
		cs = append(cs, prefillChoice{fmt.Sprintf("%d-bit, int8", bits),
			func(t *testing.T) (*inference.Model, []int) { return quantizedDemo(t, bits) },
			(*inference.Model).SetInt8Prefill, (*inference.Model).Int8Prefill,
			func(m *inference.Model) bool { return mx.HasQuantizedA8Rows(m.Backend(), bits) }})
	}
	return append(cs, prefillChoice{"bfloat16, bf16", bf16Demo,
		(*inference.Model).SetBF16Prefill, (*inference.Model).BF16Prefill,
		func(m *inference.Model) bool {
			return mx.TakesBF16Rows(m.Params()["model.layers.0.mlp.up_proj.weight"])
		}})
}

// bf16Demo is the demo model with its weight matrices rounded to bfloat16 and kept
// compact, the activations float32, with the held-out text of heldOut.
func bf16Demo(t *testing.T) (*inference.Model, []int) {
	t.Helper()
	m, _ := inferencetest.Load(t, inferencetest.Demo(t))
	if err := m.CompactWeights(mx.BFloat16); err != nil {
		t.Fatal(err)
	}
	_, ids := heldOut(t)
	return m, ids
}

// TestRoundedPrefill: with SetInt8Prefill (the 4- and 8-bit demo) or SetBF16Prefill (the
// demo in compact bfloat16), a forward pass over many positions (a prompt's, a
// scoring's) rounds each row where the backend has the kernel. On 64 positions of
// held-out text: the logits move by less than 4% of their spread at every position,
// and they do move there (the kernel ran); a copy made before the choice follows it;
// SetInt8Decode stays off; a gradient through the model (traced, as training's is) is
// the exact one, value and gradient bit for bit; and off again the logits are exact.
func TestRoundedPrefill(t *testing.T) {
	for _, c := range prefillChoices() {
		m, ids := c.load(t)
		tokens, err := m.Tokens(ids[:64])
		if err != nil {
			t.Fatal(err)
		}
		exact := logits(t, m.Forward(tokens, nil).Float32s)
		h := m.Prefix(tokens, 1)
		gradOf := func() (float32, []float32) {
			out, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
				return []*mx.Array{mx.Mean(mx.Square(m.Suffix(p[0], 1, 0)), nil, false)}
			}, []*mx.Array{h})
			if err != nil {
				t.Fatal(err)
			}
			return logits(t, out[0].Float32s)[0], logits(t, g[0].Float32s)
		}
		exactLoss, exactGrad := gradOf()

		cp, err := m.WithParams(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.set(m, true)
		if !c.get(cp) || cp.Int8Decode() {
			t.Fatalf("%s: a copy made before the choice has the choice %v, Int8Decode %v", c.name, c.get(cp), cp.Int8Decode())
		}
		fast := logits(t, cp.Forward(tokens, nil).Float32s)
		V := len(exact) / 64
		var worst float64
		differ := false
		for p := range 64 {
			w, _, d := spreadDiff(exact[p*V:(p+1)*V], fast[p*V:(p+1)*V])
			worst, differ = math.Max(worst, w), differ || d
		}
		t.Logf("%s demo, 64 positions at once: |rounded − exact| %.5f of the logits' spread at worst", c.name, worst)
		if worst > 0.04 {
			t.Errorf("%s: the rounded prefill moved a logit by %.4f of the logits' spread", c.name, worst)
		}
		if c.runs(m) != differ {
			t.Errorf("%s: the rounded prefill changed the logits: %v; the backend has the kernel: %v", c.name, differ, c.runs(m))
		}
		loss, grad := gradOf()
		if loss != exactLoss {
			t.Errorf("%s: a traced loss is %g with the rounded prefill, %g exact", c.name, loss, exactLoss)
		}
		for i := range grad {
			if grad[i] != exactGrad[i] {
				t.Fatalf("%s: gradient [%d] is %g with the rounded prefill, %g exact", c.name, i, grad[i], exactGrad[i])
			}
		}
		c.set(m, false)
		again := logits(t, cp.Forward(tokens, nil).Float32s)
		for i := range exact {
			if again[i] != exact[i] {
				t.Fatalf("%s: with the rounded prefill off again, logit %d is %g, exact %g", c.name, i, again[i], exact[i])
			}
		}
	}
}

// The quality a rounded prefill costs: the 4- and 8-bit demo's perplexity on held-out
// text with int8 prefill, and the compact bfloat16 demo's with bf16 prefill, scored 64
// positions a pass, moves by less than 1%.
func TestRoundedPrefillPerplexity(t *testing.T) {
	for _, c := range prefillChoices() {
		m, ids := c.load(t)
		exact, err := inference.Perplexity(m, ids, 64)
		if err != nil {
			t.Fatal(err)
		}
		c.set(m, true)
		ppl, err := inference.Perplexity(m, ids, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s demo, %d tokens: perplexity %.4f exact, %.4f rounded prefill (%+.3f%%)", c.name, len(ids), exact, ppl, 100*(ppl/exact-1))
		if d := ppl/exact - 1; math.Abs(d) > 0.01 {
			t.Errorf("%s: the rounded prefill's perplexity %.4f against %.4f exact", c.name, ppl, exact)
		}
	}
}

// spreadDiff compares one position's logits got with want: the largest |got − want|
// as a fraction of want's spread (max − min), the sum of those fractions squared,
// and whether any differ at all.
func spreadDiff(want, got []float32) (worst, sq float64, differ bool) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range want {
		lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
	}
	for i := range want {
		d := math.Abs(float64(got[i]-want[i])) / (hi - lo)
		worst, sq = math.Max(worst, d), sq+d*d
		differ = differ || got[i] != want[i]
	}
	return worst, sq, differ
}
