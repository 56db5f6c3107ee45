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
			av, bv := logits(t, a.Float32s), logits(t, b.Float32s)
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range av {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
			for i := range av {
				d := math.Abs(float64(av[i]-bv[i])) / (hi - lo)
				worst, sq, n = math.Max(worst, d), sq+d*d, n+1
				differ = differ || av[i] != bv[i]
			}
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
