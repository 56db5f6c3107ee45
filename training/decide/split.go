package decide

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// DefaultHeldout is the share of rows a split holds out.
const DefaultHeldout = 0.25

// Split divides rows into the ones a decision model trains on and the held-out
// ones that measure and calibrate it. It is made before training, saved with
// the model, and names rows by their line numbers; RowsSHA256 ties it to the
// rows it was made for.
type Split struct {
	Seed       uint64  `json:"seed"`
	Fraction   float64 `json:"fraction"`
	RowsSHA256 string  `json:"rows_sha256"`
	Train      []int   `json:"train"`   // line numbers
	Heldout    []int   `json:"heldout"` // line numbers
}

// MakeSplit holds out about fraction of the rows, stratified: rows are grouped
// by the answers they give (every question's option, or none), and each group
// gives its share to the held-out side. Rows with the same state text go to the
// same side, so a duplicate cannot carry a held-out row into training.
func MakeSplit(rows []Row, fraction float64, seed uint64) (*Split, error) {
	if !(fraction > 0 && fraction < 1) {
		return nil, fmt.Errorf("decide: held-out fraction %g is not between 0 and 1", fraction)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("decide: %d rows cannot be split into training and held-out", len(rows))
	}
	// A unit is the rows sharing one state; its stratum is its first row's answers.
	type unit struct{ rows []int }
	units := map[string]*unit{}
	var order []string
	strata := map[string][]string{}
	for i, r := range rows {
		u := units[r.State]
		if u == nil {
			u = &unit{}
			units[r.State] = u
			order = append(order, r.State)
			key := stratum(r)
			strata[key] = append(strata[key], r.State)
		}
		u.rows = append(u.rows, i)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5711))
	held := make([]bool, len(rows))
	for _, key := range slices.Sorted(maps.Keys(strata)) {
		states := strata[key]
		rng.Shuffle(len(states), func(i, j int) { states[i], states[j] = states[j], states[i] })
		n := 0
		for _, s := range states {
			n += len(units[s].rows)
		}
		// The stratum's share, with the fraction's remainder drawn at random so
		// that many small strata still hold out about fraction overall.
		want := float64(n) * fraction
		target := int(math.Floor(want))
		if rng.Float64() < want-float64(target) {
			target++
		}
		got := 0
		for _, s := range states {
			if got >= target {
				break
			}
			for _, i := range units[s].rows {
				held[i] = true
			}
			got += len(units[s].rows)
		}
	}
	sp := &Split{Seed: seed, Fraction: fraction, RowsSHA256: RowsHash(rows)}
	for i, r := range rows {
		if held[i] {
			sp.Heldout = append(sp.Heldout, r.Line)
		} else {
			sp.Train = append(sp.Train, r.Line)
		}
	}
	if len(sp.Heldout) == 0 || len(sp.Train) == 0 {
		return nil, fmt.Errorf("decide: %d rows at held-out fraction %g leave %d to train on and %d held out; both need some",
			len(rows), fraction, len(sp.Train), len(sp.Heldout))
	}
	return sp, nil
}

func stratum(r Row) string {
	var b strings.Builder
	for i, l := range r.Labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(l))
	}
	return b.String()
}

// RowsHash is a SHA-256 over the rows' line numbers, states and answers.
func RowsHash(rows []Row) string {
	h := sha256.New()
	var buf [8]byte
	for _, r := range rows {
		binary.LittleEndian.PutUint64(buf[:], uint64(r.Line))
		h.Write(buf[:])
		binary.LittleEndian.PutUint64(buf[:], uint64(len(r.State)))
		h.Write(buf[:])
		h.Write([]byte(r.State))
		for _, l := range r.Labels {
			binary.LittleEndian.PutUint64(buf[:], uint64(int64(l)))
			h.Write(buf[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Apply returns the training and held-out rows. The rows must be the ones the
// split was made for.
func (s *Split) Apply(rows []Row) (train, heldout []Row, err error) {
	if got := RowsHash(rows); got != s.RowsSHA256 {
		return nil, nil, fmt.Errorf("decide: the rows are not the ones the split was made for (SHA-256 %.12s…, split made for %.12s…)", got, s.RowsSHA256)
	}
	byLine := make(map[int]Row, len(rows))
	for _, r := range rows {
		byLine[r.Line] = r
	}
	pick := func(lines []int) ([]Row, error) {
		out := make([]Row, 0, len(lines))
		for _, l := range lines {
			r, ok := byLine[l]
			if !ok {
				return nil, fmt.Errorf("decide: the split names line %d, which holds no row", l)
			}
			out = append(out, r)
		}
		return out, nil
	}
	if train, err = pick(s.Train); err != nil {
		return nil, nil, err
	}
	if heldout, err = pick(s.Heldout); err != nil {
		return nil, nil, err
	}
	return train, heldout, nil
}

// HeldoutRows returns the held-out rows among rows, by line number, without
// requiring the whole file to be unchanged (decide eval on the training file).
func (s *Split) HeldoutRows(rows []Row) []Row {
	held := map[int]bool{}
	for _, l := range s.Heldout {
		held[l] = true
	}
	var out []Row
	for _, r := range rows {
		if held[r.Line] {
			out = append(out, r)
		}
	}
	return out
}
