package ror

import (
	"cmp"
	"context"
	"math"
	"slices"
	"testing"
)

// Twenty corrections on the tickets task, taken from candidate rows the model
// gets wrong (never from the held-out rows): the held-out accuracy rises, and
// every version made on the way can be restored, answering exactly as it did
// when it was made.
func TestTwentyCorrections(t *testing.T) {
	if testing.Short() {
		t.Skip("twenty corrections: -short")
	}
	ctx := context.Background()
	l := learner(t, Options{})
	remember(t, l, fixture.rows[:fitRows])
	held := scored(t, l, fixture.rows[heldFrom:heldTo])
	before, _ := accuracy(t, l, held)

	ws := append(wrong(t, l, fixture.rows[candidateFrom:candidateTo], 0), wrong(t, l, fixture.rows[candidateFrom:candidateTo], 1)...)
	slices.SortStableFunc(ws, func(a, b *item) int { return cmp.Compare(lineOf(a.state), lineOf(b.state)) }) // as tickets arrive
	if len(ws) < 20 {
		t.Fatalf("the fixture gets %d candidate decisions wrong, want 20", len(ws))
	}
	probe := []string{fixture.rows[heldFrom].State}
	type snapshot struct {
		id      uint64
		answers []string    // Decide on the probe: choices and score bits
		held    [][]float64 // the held-out rows' scores
	}
	snap := func(id uint64) snapshot {
		_, s := accuracy(t, l, held)
		return snapshot{id, decideBits(t, l, probe), s}
	}
	snaps := []snapshot{snap(0)}
	kinds := map[Kind]int{}
	for i, w := range ws[:20] {
		q := fixture.task.Questions[w.question]
		ev, err := l.ThumbDown(ctx, w.state, q.Name, q.Options[w.label].Name)
		if err != nil {
			t.Fatal(err)
		}
		kinds[ev.Kind]++
		acc, _ := accuracy(t, l, held)
		t.Logf("%2d %-6s %-9s steps %d flipped %-5v anchor %.4f → %.4f held-out %.4f  %.1f ms", i+1, q.Name, ev.Kind, ev.Steps, ev.Flipped, ev.AnchorBefore, ev.AnchorAfter, acc, ev.MS)
		if ev.Kind == KindRetrain {
			snaps = append(snaps, snap(ev.VersionAfter))
		}
	}
	after, _ := accuracy(t, l, held)
	t.Logf("held-out accuracy %.4f → %.4f over %d decisions; %v; anchor %.4f", before, after, len(held), kinds, l.AnchorAccuracy())
	if !(after > before) {
		t.Errorf("held-out accuracy %.4f after twenty corrections, %.4f before", after, before)
	}
	if vs := l.Versions(); len(vs) != len(snaps) {
		t.Fatalf("versions %v for %d kept corrections", vs, len(snaps)-1)
	}

	// Walk back through every version, newest first.
	for i := len(snaps) - 1; i >= 0; i-- {
		s := snaps[i]
		if _, err := l.RestoreVersion(s.id); err != nil {
			t.Fatal(err)
		}
		if got := decideBits(t, l, probe); !slices.Equal(got, s.answers) {
			t.Errorf("version %d restored answers %v, made %v", s.id, got, s.answers)
		}
		_, h := accuracy(t, l, held)
		for j := range h {
			for k := range h[j] {
				if math.Float64bits(h[j][k]) != math.Float64bits(s.held[j][k]) {
					t.Fatalf("version %d restored: held-out decision %d option %d scores %v, made %v", s.id, j, k, h[j][k], s.held[j][k])
				}
			}
		}
	}
	// And Undo retraces the restores.
	if ev, err := l.Undo(); err != nil || ev.VersionAfter != snaps[1].id {
		t.Errorf("undo after the walk: version %d, %v; want %d", ev.VersionAfter, err, snaps[1].id)
	}
}

func lineOf(state string) int {
	for _, r := range fixture.rows {
		if r.State == state {
			return r.Line
		}
	}
	return -1
}
