package deltamem

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func filledState(t testing.TB) *State {
	t.Helper()
	m := tinyModel(t, "llama")
	mem, err := New(m, Config{Rank: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	st := mem.NewState()
	sessionLogits(t.(*testing.T), m, mem, st, seq(12, m.Config().VocabSize, 1), 12)
	return st
}

// TestStateRoundTrip: a state survives MarshalBinary and UnmarshalState exactly,
// and a changed clone leaves the original alone.
func TestStateRoundTrip(t *testing.T) {
	st := filledState(t)
	data, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalState(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != st.Rank || got.Writes != st.Writes || !slices.Equal(got.Layers, st.Layers) {
		t.Fatalf("got rank %d writes %d layers %v, want %d %d %v", got.Rank, got.Writes, got.Layers, st.Rank, st.Writes, st.Layers)
	}
	for i := range st.S {
		if !slices.Equal(got.S[i], st.S[i]) || !slices.Equal(got.Prev[i], st.Prev[i]) {
			t.Fatalf("layer %d differs after a round trip", i)
		}
	}
	if got.Norm() != st.Norm() || st.Norm() == 0 {
		t.Fatalf("norm %g, want %g (> 0)", got.Norm(), st.Norm())
	}
	cp := st.Clone()
	cp.Reset()
	if cp.Norm() != 0 || cp.Writes != 0 || st.Norm() == 0 {
		t.Fatalf("reset clone: norm %g writes %d; original norm %g", cp.Norm(), cp.Writes, st.Norm())
	}
}

// TestStateFitsItsMemory: a state of another rank or layer set is refused
// before it is attached.
func TestStateFitsItsMemory(t *testing.T) {
	m := tinyModel(t, "llama")
	a, _ := New(m, Config{Rank: 4}, 1)
	b, _ := New(m, Config{Rank: 4, Layers: []int{1}}, 1)
	if err := b.Fits(a.NewState()); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a state for layers %v on a memory of layers %v: %v, want ErrMismatch", a.Layers(), b.Layers(), err)
	}
	if _, err := New(m, Config{Layers: []int{2}}, 1); err == nil {
		t.Fatal("New accepted layer 2 of a 2-layer model")
	}
}

// TestUnmarshalStateRejects: malformed bytes are refused with an error.
func TestUnmarshalStateRejects(t *testing.T) {
	good, err := filledState(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	nan := slices.Clone(good)
	binary.LittleEndian.PutUint32(nan[len(nan)-4:], 0x7fc00000)
	hugeRank := slices.Clone(good)
	binary.LittleEndian.PutUint32(hugeRank[8:], 1<<30)
	unordered := slices.Clone(good)
	binary.LittleEndian.PutUint32(unordered[24:], 1) // layers 1, 1
	for name, data := range map[string][]byte{
		"empty": nil, "magic": append([]byte("XMEM"), good[4:]...), "short": good[:len(good)-1],
		"long": append(slices.Clone(good), 0), "nan": nan, "huge rank": hugeRank, "layers out of order": unordered,
	} {
		if _, err := UnmarshalState(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzUnmarshalState: no input panics, and what is accepted marshals back to
// the same bytes.
func FuzzUnmarshalState(f *testing.F) {
	st := &State{Rank: 2, Layers: []int{0, 3}, S: [][]float32{{1, 2, 3, 4}, {0, 0, 0, -1}}, Prev: [][]float32{{1, 0}, {0.5, 2}}, Writes: 7}
	seed, _ := st.MarshalBinary()
	f.Add(seed)
	f.Add([]byte("DMEM"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := UnmarshalState(data)
		if err != nil {
			return
		}
		back, err := st.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted state does not marshal: %v", err)
		}
		if !slices.Equal(back, data) {
			t.Fatal("accepted state marshals to other bytes")
		}
	})
}
