package deltamem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// State is one session's memory: for each memory layer the associative state S
// and the key projection of the last position read (the next write's key). It
// is all a chat keeps between turns, and between runs of the app (Marshal).
// Hooks change it in place as the session reads tokens; a State is for one
// session, one goroutine at a time.
type State struct {
	Rank   int
	Layers []int       // the model layers, as Memory.Layers
	S      [][]float32 // per memory layer, Rank×Rank row-major: S[i][row·Rank+col]
	Prev   [][]float32 // per memory layer, the last position's key projection before its norm (Rank)
	Writes int64       // positions written since the state was empty

	spent time.Duration // the memory's own compute while attached, this process
}

// Spent is the time the memory's hooks took with this state in this process,
// all layers together, the attention they wrap excluded: the memory's cost.
func (st *State) Spent() time.Duration { return st.spent }

// NewState is an empty state for mem: S zero, nothing written.
func (mem *Memory) NewState() *State {
	st := &State{Rank: mem.rank, Layers: slices.Clone(mem.layers)}
	for range mem.layers {
		st.S = append(st.S, make([]float32, mem.rank*mem.rank))
		st.Prev = append(st.Prev, make([]float32, mem.rank))
	}
	return st
}

// Fits reports whether st was made for mem's shape.
func (mem *Memory) Fits(st *State) error {
	if st == nil {
		return errors.New("deltamem: no state")
	}
	if st.Rank != mem.rank || !slices.Equal(st.Layers, mem.layers) {
		return fmt.Errorf("%w: the state has rank %d on layers %v, the memory rank %d on layers %v", ErrMismatch,
			st.Rank, st.Layers, mem.rank, mem.layers)
	}
	return st.valid()
}

func (st *State) valid() error {
	if len(st.S) != len(st.Layers) || len(st.Prev) != len(st.Layers) {
		return fmt.Errorf("deltamem: state: %d layers but %d states and %d keys", len(st.Layers), len(st.S), len(st.Prev))
	}
	for i := range st.S {
		if len(st.S[i]) != st.Rank*st.Rank || len(st.Prev[i]) != st.Rank {
			return fmt.Errorf("deltamem: state: layer %d holds %d and %d numbers, want %d and %d", st.Layers[i], len(st.S[i]), len(st.Prev[i]), st.Rank*st.Rank, st.Rank)
		}
	}
	return nil
}

// Clone is a deep copy: a version of the state to go back to.
func (st *State) Clone() *State {
	cp := &State{Rank: st.Rank, Layers: slices.Clone(st.Layers), Writes: st.Writes}
	for i := range st.S {
		cp.S = append(cp.S, slices.Clone(st.S[i]))
		cp.Prev = append(cp.Prev, slices.Clone(st.Prev[i]))
	}
	return cp
}

// Reset empties the state in place: S zero, no previous key, no writes.
func (st *State) Reset() {
	for i := range st.S {
		clear(st.S[i])
		clear(st.Prev[i])
	}
	st.Writes = 0
}

// LayerNorms are the Frobenius norms of each layer's S.
func (st *State) LayerNorms() []float64 {
	out := make([]float64, len(st.S))
	for i, s := range st.S {
		var sum float64
		for _, v := range s {
			sum += float64(v) * float64(v)
		}
		out[i] = math.Sqrt(sum)
	}
	return out
}

// Norm is the Frobenius norm of all layers' S together.
func (st *State) Norm() float64 {
	var sum float64
	for _, n := range st.LayerNorms() {
		sum += n * n
	}
	return math.Sqrt(sum)
}

// The binary form: "DMEM", version 1, then little-endian rank, layer count,
// writes, each layer's index, and each layer's S and Prev as float32.
const (
	stateMagic   = "DMEM"
	stateVersion = 1
	maxRank      = 256
	maxLayers    = 1024
)

// MarshalBinary encodes the state for the store.
func (st *State) MarshalBinary() ([]byte, error) {
	if err := st.valid(); err != nil {
		return nil, err
	}
	n := len(st.Layers)
	out := make([]byte, 0, 4+4+4+4+8+4*n+4*n*(st.Rank*st.Rank+st.Rank))
	out = append(out, stateMagic...)
	out = binary.LittleEndian.AppendUint32(out, stateVersion)
	out = binary.LittleEndian.AppendUint32(out, uint32(st.Rank))
	out = binary.LittleEndian.AppendUint32(out, uint32(n))
	out = binary.LittleEndian.AppendUint64(out, uint64(st.Writes))
	for _, l := range st.Layers {
		out = binary.LittleEndian.AppendUint32(out, uint32(l))
	}
	for i := range st.S {
		for _, v := range st.S[i] {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
		for _, v := range st.Prev[i] {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	}
	return out, nil
}

// UnmarshalState decodes MarshalBinary's bytes, refusing anything malformed
// (wrong magic or version, sizes over the caps, a length that does not match,
// non-finite numbers) before allocating from it.
func UnmarshalState(data []byte) (*State, error) {
	const head = 4 + 4 + 4 + 4 + 8
	if len(data) < head || string(data[:4]) != stateMagic {
		return nil, errors.New("deltamem: state: not a δ-mem state")
	}
	le := binary.LittleEndian
	if v := le.Uint32(data[4:]); v != stateVersion {
		return nil, fmt.Errorf("deltamem: state: version %d, this build reads %d", v, stateVersion)
	}
	rank, n, writes := le.Uint32(data[8:]), le.Uint32(data[12:]), le.Uint64(data[16:])
	if rank < 1 || rank > maxRank || n < 1 || n > maxLayers || writes > math.MaxInt64 {
		return nil, fmt.Errorf("deltamem: state: rank %d, %d layers, %d writes out of range", rank, n, writes)
	}
	r := int(rank)
	want := head + 4*int(n) + 4*int(n)*(r*r+r)
	if len(data) != want {
		return nil, fmt.Errorf("deltamem: state: %d bytes, want %d for rank %d on %d layers", len(data), want, r, n)
	}
	st := &State{Rank: r, Writes: int64(writes)}
	p := head
	for range n {
		l := le.Uint32(data[p:])
		p += 4
		if l >= maxLayers || (len(st.Layers) > 0 && int(l) <= st.Layers[len(st.Layers)-1]) {
			return nil, fmt.Errorf("deltamem: state: layer %d out of order", l)
		}
		st.Layers = append(st.Layers, int(l))
	}
	read := func(k int) ([]float32, error) {
		out := make([]float32, k)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(data[p:]))
			p += 4
			if math.IsNaN(float64(out[i])) || math.IsInf(float64(out[i]), 0) {
				return nil, errors.New("deltamem: state: a number is not finite")
			}
		}
		return out, nil
	}
	for range n {
		s, err := read(r * r)
		if err != nil {
			return nil, err
		}
		prev, err := read(r)
		if err != nil {
			return nil, err
		}
		st.S, st.Prev = append(st.S, s), append(st.Prev, prev)
	}
	return st, nil
}
