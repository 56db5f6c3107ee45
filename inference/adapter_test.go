package inference

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// randomAdapter updates q_proj and down_proj of every layer with random A and B, so
// it visibly changes the logits.
func randomAdapter(t testing.TB, m *Model, name string, seed uint64, scale float32) *Adapter {
	t.Helper()
	const rank = 2
	loras := map[string]LoRA{}
	m.Linears(func(path string, l *Linear) {
		if !slices.Contains([]string{"self_attn.q_proj", "mlp.down_proj"}, path[len("model.layers.0."):]) {
			return
		}
		loras[path] = LoRA{
			A:     mx.MulScalar(mx.RandomNormal(seed, l.In, rank), 0.3),
			B:     mx.MulScalar(mx.RandomNormal(seed+1, rank, l.Out), 0.3),
			Scale: scale,
		}
		seed += 2
	})
	if len(loras) == 0 {
		t.Fatal("no layers to adapt")
	}
	return NewAdapter(name, loras)
}

func forwardLogits(t testing.TB, m *Model, ids []int) []float32 {
	t.Helper()
	x, err := m.Tokens(ids)
	if err != nil {
		t.Fatal(err)
	}
	return floats(t, m.Forward(x, nil))
}

// The effective weight is the base plus the sum of the stacked updates, each with
// its own scale; popping the top one gives back bit for bit what the model computed
// before the push, and every change gives a new version.
func TestAdapterStackPushPop(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 31, b)
	ids := tokenSeq(9, cfg.VocabSize, 2)
	if v := m.AdapterVersion(); v != 0 {
		t.Fatalf("a fresh model has adapter version %d, want 0", v)
	}
	user := randomAdapter(t, m, "user", 100, 2)
	v1, err := m.PushAdapter(user)
	if err != nil {
		t.Fatal(err)
	}
	before := forwardLogits(t, m, ids)

	temp := randomAdapter(t, m, "ttt", 200, 0.5)
	v2, err := m.PushAdapter(temp)
	if err != nil {
		t.Fatal(err)
	}
	stacked := forwardLogits(t, m, ids)
	if maxAbsDiff(before, stacked) < 1e-3 {
		t.Fatal("the pushed adapter hardly changes the logits")
	}
	// Against the weights fused by hand: W + 2·(A₁B₁)ᵀ + 0.5·(A₂B₂)ᵀ.
	fused := m.Params()
	for _, a := range []*Adapter{user, temp} {
		for _, path := range a.Paths() {
			lo, _ := a.LoRA(path)
			fused[path+".weight"] = mx.Add(fused[path+".weight"], mx.MulScalar(mx.Transpose(mx.Matmul(lo.A, lo.B)), lo.Scale))
		}
	}
	bare, err := NewRandom(cfg, 31, b).WithParams(fused)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(stacked, forwardLogits(t, bare, ids)); d > 1e-4 {
		t.Errorf("stacked adapters differ from the hand-fused weights by %g", d)
	}

	top, v3, err := m.PopAdapter()
	if err != nil || top != temp {
		t.Fatalf("pop: %p, %v; want the pushed adapter %p", top, err, temp)
	}
	if got := forwardLogits(t, m, ids); !slices.Equal(got, before) {
		t.Errorf("after pop the logits differ from before the push by %g, want bit-identical", maxAbsDiff(got, before))
	}
	if !(0 < v1 && v1 < v2 && v2 < v3) || m.AdapterVersion() != v3 {
		t.Errorf("versions %d, %d, %d (now %d), want increasing", v1, v2, v3, m.AdapterVersion())
	}
	if got := m.Adapters(); len(got) != 1 || got[0] != user {
		t.Errorf("stack after pop: %v, want the user's adapter alone", got)
	}
	m.PopAdapter()
	if _, v, err := m.PopAdapter(); !errors.Is(err, ErrNoAdapter) || v != m.AdapterVersion() {
		t.Errorf("pop of an empty stack: version %d, %v; want ErrNoAdapter and no change", v, err)
	}
}

// Adapters that do not fit the model are refused and change nothing.
func TestAdapterChecks(t *testing.T) {
	b := cpu(t)
	m := NewRandom(tinyConfig("llama"), 32, b)
	v := m.AdapterVersion()
	for name, loras := range map[string]map[string]LoRA{
		"missing layer": {"model.layers.9.self_attn.q_proj": {A: mx.Zeros(32, 2), B: mx.Zeros(2, 64)}},
		"wrong in":      {"model.layers.0.self_attn.q_proj": {A: mx.Zeros(31, 2), B: mx.Zeros(2, 64)}},
		"rank mismatch": {"model.layers.0.self_attn.q_proj": {A: mx.Zeros(32, 2), B: mx.Zeros(3, 64)}},
		"no B":          {"model.layers.0.self_attn.q_proj": {A: mx.Zeros(32, 2)}},
		"empty":         {},
	} {
		if _, err := m.PushAdapter(NewAdapter(name, loras)); err == nil {
			t.Errorf("%s: pushed", name)
		}
	}
	if _, err := m.SetAdapterParams(nil); !errors.Is(err, ErrNoAdapter) {
		t.Errorf("set params without an adapter: %v", err)
	}
	m.PushAdapter(randomAdapter(t, m, "a", 1, 1))
	w := m.AdapterVersion()
	if _, err := m.SetAdapterParams(map[string]*mx.Array{"model.layers.0.self_attn.q_proj.lora_a": mx.Zeros(32, 3)}); !errors.Is(err, ErrTensorShape) {
		t.Errorf("wrong shape: %v", err)
	}
	if _, err := m.SetAdapterParams(map[string]*mx.Array{"model.layers.0.self_attn.k_proj.lora_a": mx.Zeros(32, 2)}); err == nil {
		t.Error("set params of a layer without an update")
	}
	if m.AdapterVersion() != w || w != v+1 {
		t.Errorf("versions %d then %d after refused changes, want %d", w, m.AdapterVersion(), v+1)
	}
}

// Any state the history holds can be restored, with the logits it gave bit for bit.
func TestAdapterRestore(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	m := NewRandom(cfg, 33, b)
	ids := tokenSeq(7, cfg.VocabSize, 3)
	logitsAt := map[uint64][]float32{0: forwardLogits(t, m, ids)}
	record := func(v uint64, err error) uint64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		logitsAt[v] = forwardLogits(t, m, ids)
		return v
	}
	v1 := record(m.PushAdapter(randomAdapter(t, m, "user", 10, 1)))
	snap := m.AdapterSnapshot()
	a := m.TopAdapter().Params()
	for name, p := range a {
		a[name] = mx.AddScalar(p, 0.01)
	}
	v2 := record(m.SetAdapterParams(a))
	v3 := record(m.PushAdapter(randomAdapter(t, m, "temp", 20, 1)))
	if slices.Equal(logitsAt[v1], logitsAt[v2]) || slices.Equal(logitsAt[v2], logitsAt[v3]) {
		t.Fatal("the changes did not change the logits")
	}
	for _, v := range []uint64{v1, 0, v3, v2} {
		nv, err := m.RestoreVersion(v)
		if err != nil {
			t.Fatalf("restore %d: %v", v, err)
		}
		if nv <= v3 || nv != m.AdapterVersion() {
			t.Errorf("restore %d gave version %d, want a new one", v, nv)
		}
		if got := forwardLogits(t, m, ids); !slices.Equal(got, logitsAt[v]) {
			t.Errorf("restored version %d differs from its logits by %g, want bit-identical", v, maxAbsDiff(got, logitsAt[v]))
		}
	}
	if _, err := m.RestoreAdapter(snap); err != nil {
		t.Fatal(err)
	}
	if got := forwardLogits(t, m, ids); !slices.Equal(got, logitsAt[snap.Version]) {
		t.Error("restored snapshot differs")
	}

	// The history is bounded: old versions fall out.
	m.SetAdapterHistory(2)
	if h := m.AdapterHistory(); len(h) != 2 || h[1] != m.AdapterVersion() {
		t.Errorf("history %v, want the last 2 ending with %d", h, m.AdapterVersion())
	}
	v := m.AdapterVersion()
	if _, err := m.RestoreVersion(v1); !errors.Is(err, ErrAdapterVersion) || m.AdapterVersion() != v {
		t.Errorf("restore of a version out of the history: %v", err)
	}
}

// A session whose cache was computed with other adapters starts over: a prefill of
// the same prompt reuses nothing and gives what a fresh session gives, and a decode
// step recomputes what the session holds.
func TestSessionDropsCacheWhenAdaptersChange(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	m := NewRandom(cfg, 34, b)
	m.PushAdapter(randomAdapter(t, m, "user", 40, 1))
	prompt := tokenSeq(12, cfg.VocabSize, 4)
	sess := NewSession(m)
	if _, _, err := sess.Prefill(prompt); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Prefill(prompt); err != nil { // unchanged: reused
		t.Fatal(err)
	}
	m.PushAdapter(randomAdapter(t, m, "temp", 50, 1))
	got, reused, err := sess.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := NewSession(m).Prefill(prompt)
	if reused != 0 || !slices.Equal(floats(t, got), floats(t, want)) {
		t.Errorf("after an adapter change: reused %d, logits differ from a fresh session's by %g; want 0 and equal",
			reused, maxAbsDiff(floats(t, got), floats(t, want)))
	}
	if sess.AdapterVersion() != m.AdapterVersion() {
		t.Errorf("session version %d, model %d", sess.AdapterVersion(), m.AdapterVersion())
	}
	_, reused, _ = sess.Prefill(prompt)
	if reused != len(prompt)-1 {
		t.Errorf("unchanged adapters: reused %d, want %d", reused, len(prompt)-1)
	}

	// Append after a change recomputes the whole context.
	m.PopAdapter()
	next := []int{5}
	got, err = sess.Append(next)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ = NewSession(m).Prefill(append(slices.Clone(prompt), next...))
	if !slices.Equal(floats(t, got), floats(t, want)) || sess.Cache().Len() != len(prompt)+1 {
		t.Errorf("append after a change: logits differ by %g, cache %d; want equal and %d",
			maxAbsDiff(floats(t, got), floats(t, want)), sess.Cache().Len(), len(prompt)+1)
	}
}

// A fork trains without the original seeing it, and publishes in one step.
func TestForkKeepsTheOriginal(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen2")
	m := NewRandom(cfg, 35, b)
	m.PushAdapter(randomAdapter(t, m, "user", 60, 1))
	ids := tokenSeq(6, cfg.VocabSize, 5)
	v, before := m.AdapterVersion(), forwardLogits(t, m, ids)

	work := m.Fork()
	if work.AdapterVersion() != v || len(work.AdapterHistory()) != 0 {
		t.Errorf("fork: version %d, history %v; want %d and none", work.AdapterVersion(), work.AdapterHistory(), v)
	}
	if _, err := work.PushAdapter(randomAdapter(t, work, "ttt", 70, 1)); err != nil {
		t.Fatal(err)
	}
	p := work.TopAdapter().Params()
	for name, a := range p {
		p[name] = mx.MulScalar(a, 1.5)
	}
	if _, err := work.SetAdapterParams(p); err != nil {
		t.Fatal(err)
	}
	trained := forwardLogits(t, work, ids)
	if m.AdapterVersion() != v || !slices.Equal(forwardLogits(t, m, ids), before) {
		t.Fatal("changing the fork's adapters changed the original")
	}
	if _, err := m.RestoreAdapter(work.AdapterSnapshot()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(forwardLogits(t, m, ids), trained) || m.AdapterVersion() <= v {
		t.Error("the published state does not give the fork's logits")
	}
	// The base weights are shared, not copied.
	if m.Params()["model.norm.weight"] != work.Params()["model.norm.weight"] {
		t.Error("the fork copied the base weights")
	}
}

// A reply decoding while another goroutine pushes, pops, sets and restores adapters:
// no data race (run with -race), no error, and afterwards the session agrees with a
// fresh one.
func TestGenerateWhileAdaptersChange(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("llama")
	cfg.MaxPositionEmbeddings = 0
	m := NewRandom(cfg, 36, b)
	user := randomAdapter(t, m, "user", 80, 1)
	m.PushAdapter(user)
	prompt := tokenSeq(8, cfg.VocabSize, 6)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var changes int
	go func() {
		defer wg.Done()
		temp := randomAdapter(t, m, "temp", 90, 1)
		base := m.AdapterSnapshot()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			var err error
			switch i % 4 {
			case 0:
				_, err = m.PushAdapter(temp)
			case 1:
				p := m.TopAdapter().Params()
				for name, a := range p {
					p[name] = mx.MulScalar(a, 0.9)
				}
				_, err = m.SetAdapterParams(p)
			case 2:
				_, _, err = m.PopAdapter()
			case 3:
				_, err = m.RestoreAdapter(base)
			}
			if err != nil {
				t.Error(err)
				return
			}
			changes++
		}
	}()
	sess := NewSession(m)
	for turn := 0; turn < 4; turn++ {
		var got []int
		st, err := Generate(context.Background(), sess, prompt, GenerateOptions{MaxTokens: 12}, func(tok int) bool {
			got = append(got, tok)
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.GeneratedTokens != 12 {
			t.Fatalf("turn %d: %d tokens", turn, st.GeneratedTokens)
		}
		prompt = append(prompt, got[:4]...)
	}
	close(done)
	wg.Wait()
	t.Logf("%d adapter changes during 4 replies", changes)
	// The cache was extended one token at a time, so agreement is up to rounding;
	// keys and values of another adapter would be off by far more.
	got, _, err := sess.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := NewSession(m).Prefill(prompt)
	if d := maxAbsDiff(floats(t, got), floats(t, want)); d > 1e-4 || sess.AdapterVersion() != m.AdapterVersion() {
		t.Errorf("after the changes the session (version %d) differs from a fresh one (%d) by %g",
			sess.AdapterVersion(), m.AdapterVersion(), d)
	}
}
