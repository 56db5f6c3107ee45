package inference

import (
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// passHook attends with the query it is given and records what it saw.
type passHook struct {
	calls   int
	lengths []int // L of each x
	addQ    float32
}

func (h *passHook) Attend(x, q *mx.Array, attend func(*mx.Array) *mx.Array) *mx.Array {
	h.calls++
	h.lengths = append(h.lengths, x.Dim(1))
	if h.addQ != 0 {
		q = mx.AddScalar(q, h.addQ)
	}
	return attend(q)
}

// decodeLogits prefills ids[:n] and decodes the rest one by one, returning every
// logits vector the session produced.
func decodeLogits(t *testing.T, s *Session, ids []int, n int) [][]float32 {
	t.Helper()
	var out [][]float32
	lg, _, err := s.Prefill(ids[:n])
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, floats(t, lg))
	for _, id := range ids[n:] {
		if lg, err = s.Append([]int{id}); err != nil {
			t.Fatal(err)
		}
		out = append(out, floats(t, lg))
	}
	return out
}

// TestHookThatPassesChangesNothing: a hook that attends with the query as given
// leaves every logit of prefill and decode bit-identical, on llama and qwen3,
// and is consulted once per layer per forward with the forward's length; Reset
// keeps it.
func TestHookThatPassesChangesNothing(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			m := NewRandom(tinyConfig(arch), 3, cpu(t))
			ids := tokenSeq(40, 97, 5)
			want := decodeLogits(t, NewSession(m), ids, 30)

			s := NewSession(m)
			hooks := make([]*passHook, m.cfg.NumHiddenLayers)
			for i := range hooks {
				hooks[i] = &passHook{}
				if err := s.Cache().SetHook(i, hooks[i]); err != nil {
					t.Fatal(err)
				}
			}
			got := decodeLogits(t, s, ids, 30)
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("position %d: logits differ with a pass-through hook (max diff %g)", i, maxAbsDiff(got[i], want[i]))
				}
			}
			for i, h := range hooks {
				if wantL := []int{30, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; !slices.Equal(h.lengths, wantL) {
					t.Fatalf("layer %d: hook saw lengths %v, want %v", i, h.lengths, wantL)
				}
			}
			s.Reset()
			if s.Cache().Hook(0) != hooks[0] {
				t.Fatal("Reset removed the hook")
			}
			if s.Cache().SetHook(len(hooks), hooks[0]) == nil {
				t.Fatal("SetHook accepted a layer past the last")
			}
		})
	}
}

// TestHookChangesOutput: a hook that does change the query changes the logits,
// so the tests above would notice a cache that ignored its hooks.
func TestHookChangesOutput(t *testing.T) {
	m := NewRandom(tinyConfig("llama"), 3, cpu(t))
	ids := tokenSeq(12, 97, 7)
	plain := decodeLogits(t, NewSession(m), ids, 12)
	s := NewSession(m)
	if err := s.Cache().SetHook(1, &passHook{addQ: 0.5}); err != nil {
		t.Fatal(err)
	}
	if got := decodeLogits(t, s, ids, 12); slices.Equal(got[0], plain[0]) {
		t.Fatal("a hook that shifts the query left the logits unchanged")
	}
}
