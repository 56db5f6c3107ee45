package tao

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/training/lora"
)

// attribution is the constructed task's known format: the answer ends with a
// fortune cookie's attribution line ("  -- Mark Twain"). The demo model,
// pretrained on fortunes, writes one in about one answer of six unprompted.
const attribution = `\n\s*-- ?\S[^\n]*$`

// demoPrompts are questions in the demo model's world (the Jargon File and
// fortune cookies): the unlabeled prompts of the tests' rounds, 80 of them.
func demoPrompts() []string {
	terms := []string{"a hacker", "a kludge", "the bazaar", "a daemon", "a wizard", "a bug", "Unix", "a guru",
		"the net", "a hack", "a core dump", "a cookie", "a flame war", "a mailing list", "a luser", "a feature",
		"a spaghetti code", "the source", "a crock", "a patch"}
	forms := []string{"What is %s?", "Tell me about %s.", "Why do people talk about %s?", "Who needs %s?"}
	var out []string
	for _, f := range forms {
		for _, t := range terms {
			out = append(out, fmt.Sprintf(f, t))
		}
	}
	return out
}

// demo loads the bundled demo model and its replier.
func demo(t testing.TB) (*inference.Model, *inference.Replier, *tokenizer.Tokenizer) {
	t.Helper()
	dir := inferencetest.Demo(t)
	m, tok := inferencetest.Load(t, dir)
	rep, err := inference.LoadReplier(m, dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, rep, tok
}

// pushUserAdapter gives m a trained-looking adapter of its own (lora_b
// random, not zero), as a user's would be.
func pushUserAdapter(t testing.TB, m *inference.Model, seed uint64) {
	t.Helper()
	a, _, err := lora.New(m, lora.Config{Rank: 4, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PushAdapter(a); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	ps := map[string]*mx.Array{}
	params := lora.Params(m)
	for _, n := range slices.Sorted(maps.Keys(params)) { // in order: the same draws for the same weights every run
		p := params[n]
		if n[len(n)-1] == 'b' {
			s := p.Shape()
			v := make([]float32, s[0]*s[1])
			for i := range v {
				v[i] = float32(r.NormFloat64() * 0.01)
			}
			ps[n] = mx.FromData(m.Backend(), mx.Float32, v, s...)
		}
	}
	if err := lora.SetParams(m, ps); err != nil {
		t.Fatal(err)
	}
}

// adapterBits is every weight of m's adapters, by adapter and name, as raw
// float32 values: equal maps, bit-identical adapters.
func adapterBits(t testing.TB, m *inference.Model) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for i, a := range m.Adapters() {
		for n, p := range a.Params() {
			v, err := p.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%d/%s", i, n)] = slices.Clone(v)
		}
	}
	return out
}

func sameBits(a, b map[string][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] && !(v[i] != v[i] && w[i] != w[i]) {
				return false
			}
		}
	}
	return true
}

// constantReward knows nothing: every answer scores the same.
type constantReward float64

func (c constantReward) Name() string { return "constant" }
func (c constantReward) Score(_ context.Context, items []Item) ([]float64, error) {
	out := make([]float64, len(items))
	for i := range out {
		out[i] = float64(c)
	}
	return out, nil
}

// randomReward knows nothing either: every answer gets a fresh random score.
type randomReward struct{ r *rand.Rand }

func (r *randomReward) Name() string { return "random" }
func (r *randomReward) Score(_ context.Context, items []Item) ([]float64, error) {
	out := make([]float64, len(items))
	for i := range out {
		out[i] = r.r.Float64()
	}
	return out, nil
}
