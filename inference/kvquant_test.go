package inference

import (
	"fmt"
	"math"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// stepLogits prefills ids[:1] into s, appends the rest one at a time and
// returns the logits after every token.
func stepLogits(t *testing.T, s *Session, ids []int) [][]float32 {
	t.Helper()
	return stepLogitsWith(t, s, ids, nil)
}

// stepLogitsWith is stepLogits calling before(i), where it is not nil, before
// it appends ids[i].
func stepLogitsWith(t *testing.T, s *Session, ids []int, before func(i int)) [][]float32 {
	t.Helper()
	logits, _, err := s.Prefill(ids[:1])
	out := [][]float32{}
	for i := 1; ; i++ {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, floats(t, logits))
		if i == len(ids) {
			return out
		}
		if before != nil {
			before(i)
		}
		logits, err = s.Append(ids[i : i+1])
	}
}

// A quantized KV cache decodes what the exact one does, up to its rounding:
// past the tail (which joins the packed part at 16, 32, … positions), through a
// multi-token prefill after decoding, and after a trim into the packed part. A
// head dimension below the group size is padded.
func TestQuantizedCacheFollowsExact(t *testing.T) {
	b := cpu(t)
	for _, arch := range []string{"llama", "qwen3"} {
		m := NewRandom(tinyConfig(arch), 7, b)
		ids := tokenSeq(200, m.cfg.VocabSize, 3)
		exact := stepLogits(t, NewSession(m), ids)
		for _, o := range []CacheOptions{{Bits: 16}, {Bits: 8}, {Bits: 8, GroupSize: 32}, {Bits: 4}} {
			t.Run(fmt.Sprintf("%s/%d-bit/group %d", arch, o.Bits, o.GroupSize), func(t *testing.T) {
				s, err := NewSessionWith(m, o)
				if err != nil {
					t.Fatal(err)
				}
				got := stepLogits(t, s, ids)
				tol := 0.005 // of the logits' spread
				if o.Bits == 4 {
					tol = 0.05
				}
				worst := 0.0
				for i := range got {
					worst = max(worst, maxAbsDiff(got[i], exact[i])/spreadOf(exact[i]))
					if d, spread := maxAbsDiff(got[i], exact[i]), spreadOf(exact[i]); d > tol*spread {
						t.Fatalf("position %d: logits differ by %g, %g of their spread", i, d, d/spread)
					}
				}
				t.Logf("largest difference: %.4f of the logits' spread", worst)
				if l := s.cache.layers[0]; o.Bits == 16 && (l.k == nil || l.k.DType() != mx.BFloat16 || l.qk != nil) {
					t.Fatalf("200 positions decoded and the frozen part is not bfloat16")
				} else if o.Bits < 16 && (l.qk == nil || l.k != nil) {
					t.Fatalf("200 positions decoded and nothing packed")
				}
				// Trim into the packed part, prefill a multi-token continuation:
				// the same logits as a fresh quantized session fed the same tokens.
				s.cache.Trim(70)
				s.tokens = s.tokens[:70]
				cont := append(append([]int{}, ids[:70]...), tokenSeq(30, m.cfg.VocabSize, 9)...)
				after, _, err := s.Prefill(cont)
				if err != nil {
					t.Fatal(err)
				}
				fresh, _ := NewSessionWith(m, o)
				want := stepLogits(t, fresh, cont)
				if d, spread := maxAbsDiff(floats(t, after), want[len(want)-1]), spreadOf(want[len(want)-1]); d > tol*spread {
					t.Errorf("after a trim and a prefill, logits differ from a fresh session's by %g of their spread", d/spread)
				}
			})
		}
	}
}

// The packed part takes the memory the format says: 8 bits a value and a
// float32 scale and bias per group, against 32 bits a value.
func TestQuantizedCacheBytes(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	cfg.HeadDim = 64
	m := NewRandom(cfg, 7, b)
	ids := tokenSeq(600, m.cfg.VocabSize, 3)
	dense, q8 := NewSession(m), errSession(NewSessionWith(m, CacheOptions{Bits: 8}))
	for _, s := range []*Session{dense, q8} {
		if _, _, err := s.Prefill(ids); err != nil {
			t.Fatal(err)
		}
	}
	want := float64(dense.cache.Bytes()) * (8 + 64.0/64) / 32
	if got := float64(q8.cache.Bytes()); math.Abs(got-want) > 0.01*want {
		t.Errorf("8-bit cache of 600 positions: %g bytes, want %g (dense %d)", got, want, dense.cache.Bytes())
	}
	// A 16-bit cache: half.
	h16 := errSession(NewSessionWith(m, CacheOptions{Bits: 16}))
	if _, _, err := h16.Prefill(ids); err != nil {
		t.Fatal(err)
	}
	if got, want := h16.cache.Bytes(), dense.cache.Bytes()/2; got != want {
		t.Errorf("16-bit cache of 600 positions: %d bytes, want %d", got, want)
	}
}

func TestCacheOptionsRefused(t *testing.T) {
	m := NewRandom(tinyConfig("llama"), 7, cpu(t))
	for _, o := range []CacheOptions{{Bits: 7}, {Bits: 8, GroupSize: 48}, {Bits: 1}, {Bits: 17}, {Bits: 32}} {
		if _, err := NewSessionWith(m, o); err == nil {
			t.Errorf("%+v accepted", o)
		} else if o.Bits != 8 && !strings.Contains(err.Error(), "or 16 bits") {
			t.Errorf("%+v: %v does not name the 16-bit cache", o, err)
		}
	}
}

func errSession(s *Session, err error) *Session {
	if err != nil {
		panic(err)
	}
	return s
}

// spreadOf is max − min of v.
func spreadOf(v []float32) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, float64(x)), max(hi, float64(x))
	}
	return hi - lo
}
