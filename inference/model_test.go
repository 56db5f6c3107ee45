package inference

import (
	"math"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

func cpu(t testing.TB) mx.Backend {
	t.Helper()
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyConfig is a small model of the given architecture: hidden 32, 2 layers, 4
// query and 2 key/value heads of 16 (wider than hidden/heads), vocab 97.
func tinyConfig(modelType string) Config {
	return Config{
		ModelType: modelType, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-5,
		RopeTheta: 10000, VocabSize: 97, TieWordEmbeddings: true, tieSet: true,
	}
}

func tokenSeq(n, vocab int, seed int) []int {
	ids := make([]int, n)
	x := seed
	for i := range ids {
		x = (x*1103515245 + 12345) & 0x7fffffff
		ids[i] = x % vocab
	}
	return ids
}

func floats(t testing.TB, a *mx.Array) []float32 {
	t.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	if math.IsNaN(d) { // a NaN on either side is no match: d > tol would be false
		return math.Inf(1)
	}
	return d
}

func TestIncrementalDecodeMatchesFullForward(t *testing.T) {
	b := cpu(t)
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			cfg := tinyConfig(arch)
			m := NewRandom(cfg, 1, b)
			const n, prefill = 70, 5 // crosses two tail merges (16 and 32)
			seqs := [][]int{tokenSeq(n, cfg.VocabSize, 1), tokenSeq(n, cfg.VocabSize, 2)}
			ids, err := m.Tokens(seqs...)
			if err != nil {
				t.Fatal(err)
			}
			full := floats(t, m.Forward(ids, nil)) // (2, n, V)
			c := NewCache(m)
			first := make([][]int, 2)
			for r := range first {
				first[r] = seqs[r][:prefill]
			}
			pre, _ := m.Tokens(first...)
			got := floats(t, m.Forward(pre, c))
			V := cfg.VocabSize
			check := func(pos int, row []float32, r int) {
				want := full[(r*n+pos)*V : (r*n+pos+1)*V]
				if d := maxAbsDiff(row, want); d > 2e-5 {
					t.Fatalf("row %d position %d: max |Δ| = %g against the full forward", r, pos, d)
				}
			}
			for r := 0; r < 2; r++ {
				for p := 0; p < prefill; p++ {
					check(p, got[(r*prefill+p)*V:(r*prefill+p+1)*V], r)
				}
			}
			for p := prefill; p < n; p++ {
				step, _ := m.Tokens([]int{seqs[0][p]}, []int{seqs[1][p]})
				logits := floats(t, m.ForwardLast(step, c))
				for r := 0; r < 2; r++ {
					check(p, logits[r*V:(r+1)*V], r)
				}
				if c.Len() != p+1 {
					t.Fatalf("cache length %d after position %d", c.Len(), p)
				}
			}
		})
	}
}

func TestCacheLenBytesTrim(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 2, b)
	c := NewCache(m)
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("empty cache: len %d, bytes %d", c.Len(), c.Bytes())
	}
	seq := tokenSeq(40, cfg.VocabSize, 5)
	ids, _ := m.Tokens(seq[:10])
	m.Forward(ids, c)
	for _, tok := range seq[10:40] {
		ids, _ := m.Tokens([]int{tok})
		m.ForwardLast(ids, c)
	}
	// layers × (k, v) × Hkv × positions × head_dim × 4 bytes
	if want := int64(2 * 2 * 2 * 40 * 16 * 4); c.Len() != 40 || c.Bytes() != want {
		t.Errorf("after 40 tokens: len %d, bytes %d; want 40, %d", c.Len(), c.Bytes(), want)
	}
	for _, n := range []int{45, 39, 20, 3, 0} {
		c.Trim(n)
		if want := min(n, 40); c.Len() != want {
			t.Errorf("Trim(%d): len %d, want %d", n, c.Len(), want)
		}
	}
}

// After Trim the cache must continue exactly as if the dropped tokens had never been
// seen: the next logits equal a fresh full forward's.
func TestTrimThenContinue(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 3, b)
	seq := tokenSeq(50, cfg.VocabSize, 9)
	alt := tokenSeq(8, cfg.VocabSize, 10)
	c := NewCache(m)
	ids, _ := m.Tokens(seq[:30])
	m.Forward(ids, c)
	for _, keep := range []int{25, 12} { // inside the tail, then inside the frozen part
		c.Trim(keep)
		for i, tok := range alt {
			step, _ := m.Tokens([]int{tok})
			got := floats(t, m.ForwardLast(step, c))
			ref, _ := m.Tokens(append(append([]int{}, seq[:keep]...), alt[:i+1]...))
			want := floats(t, m.ForwardLast(ref, nil))
			if d := maxAbsDiff(got, want); d > 2e-5 {
				t.Fatalf("trim to %d, token %d: max |Δ| = %g", keep, i, d)
			}
		}
		c.Trim(keep) // drop alt again
		seqIDs, _ := m.Tokens(seq[keep:30])
		m.Forward(seqIDs, c)
	}
}

func TestSessionPrefixReuse(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen2")
	m := NewRandom(cfg, 4, b)
	turn1 := tokenSeq(20, cfg.VocabSize, 1)
	reply := tokenSeq(6, cfg.VocabSize, 2)
	turn2 := append(append(append([]int{}, turn1...), reply...), tokenSeq(9, cfg.VocabSize, 3)...)

	s := NewSession(m)
	if _, reused, err := s.Prefill(turn1); err != nil || reused != 0 {
		t.Fatalf("first prefill: reused %d, %v", reused, err)
	}
	for _, tok := range reply[:4] { // the session saw only part of the reply
		if _, err := s.Append([]int{tok}); err != nil {
			t.Fatal(err)
		}
	}
	got, reused, err := s.Prefill(turn2)
	if err != nil {
		t.Fatal(err)
	}
	if reused != 24 {
		t.Errorf("reused %d tokens, want 24 (20 of the prompt and 4 of the reply)", reused)
	}
	fresh := NewSession(m)
	want, _, err := fresh.Prefill(turn2)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(floats(t, got), floats(t, want)); d > 2e-5 {
		t.Errorf("reused prefix: max |Δ| = %g against a fresh session", d)
	}
	// The same prompt again: everything but the last token is reused.
	again, reused, _ := s.Prefill(turn2)
	if reused != len(turn2)-1 {
		t.Errorf("same prompt: reused %d, want %d", reused, len(turn2)-1)
	}
	if d := maxAbsDiff(floats(t, again), floats(t, want)); d > 2e-5 {
		t.Errorf("same prompt: max |Δ| = %g", d)
	}
	// A diverging prompt is recomputed from the divergence.
	other := append(append([]int{}, turn1[:5]...), 1, 2, 3)
	if _, reused, _ := s.Prefill(other); reused != 5 {
		t.Errorf("diverging prompt: reused %d, want 5", reused)
	}
	if got := s.Tokens(); len(got) != len(other) || s.Cache().Len() != len(other) {
		t.Errorf("session holds %d tokens, cache %d, want %d", len(got), s.Cache().Len(), len(other))
	}
}

// A session that holds a prompt and gets another that agrees with it on the
// first d tokens, for every d from 0 to its length (a different token at d, the
// prompt cut at d, or extended after it), gives the logits a fresh session gives:
// reusing one cached token too many would keep a key and value the new prompt
// does not have.
func TestSessionPrefixReuseAtEveryDivergence(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 5, b)
	held := tokenSeq(12, cfg.VocabSize, 7)
	sess := NewSession(m)
	for d := 0; d <= len(held); d++ {
		other := (held[min(d, len(held)-1)] + 1) % cfg.VocabSize
		for _, prompt := range [][]int{
			append(slices.Clone(held[:d]), other, 3), // diverges at d
			append(slices.Clone(held[:d]), other),    // diverges at d, in the last token
			slices.Clone(held[:max(d, 1)]),           // a prefix of what is held
		} {
			if _, _, err := sess.Prefill(held); err != nil {
				t.Fatal(err)
			}
			got, reused, err := sess.Prefill(prompt)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := NewSession(m).Prefill(prompt)
			if err != nil {
				t.Fatal(err)
			}
			if dd := maxAbsDiff(floats(t, got), floats(t, want)); dd > 2e-5 {
				t.Errorf("held %d tokens, prompt %v agreeing on %d: reused %d, logits differ from a fresh session's by %g",
					len(held), prompt, d, reused, dd)
			}
			if !slices.Equal(sess.Tokens(), prompt) || sess.Cache().Len() != len(prompt) {
				t.Errorf("prompt agreeing on %d: the session holds %v (cache %d), want the prompt", d, sess.Tokens(), sess.Cache().Len())
			}
		}
	}
}

// Prompts longer than one prefill chunk are split; the result must not change.
func TestChunkedPrefill(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	cfg.MaxPositionEmbeddings = 2048
	m := NewRandom(cfg, 5, b)
	seq := tokenSeq(prefillChunk+37, cfg.VocabSize, 4)
	s := NewSession(m)
	got, _, err := s.Prefill(seq)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := m.Tokens(seq)
	want := floats(t, m.ForwardLast(ids, nil))
	if d := maxAbsDiff(floats(t, got), want); d > 5e-5 {
		t.Errorf("chunked prefill: max |Δ| = %g", d)
	}
}

// Prefix then Suffix is Forward, for every cut, on the positions asked for.
func TestPrefixSuffixIsForward(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 5, b)
	ids, _ := m.Tokens(tokenSeq(9, cfg.VocabSize, 4))
	want := floats(t, m.Forward(ids, nil))
	v := cfg.VocabSize
	for k := 0; k <= m.Blocks(); k++ {
		got := floats(t, m.Suffix(m.Prefix(ids, k), k, 3))
		if len(got) != 6*v {
			t.Fatalf("k=%d: %d logits, want %d", k, len(got), 6*v)
		}
		for i, g := range got {
			if d := g - want[3*v+i]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("k=%d: logit %d is %v, Forward %v", k, i, g, want[3*v+i])
			}
		}
	}
	if m.Prefix(ids, m.Blocks()+1).Err() == nil || m.Suffix(m.Prefix(ids, 1), 1, 9).Err() == nil {
		t.Error("an out-of-range cut or position was taken")
	}
}
