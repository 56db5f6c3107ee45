package ror

import (
	"fmt"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// version is the weights at one point: the whole head, and the backbone's
// adapter state (gen numbers the adapter states RoR made; equal gens, equal
// adapters).
type version struct {
	id      uint64
	head    map[string]*mx.Array
	adapter inference.AdapterState
	gen     uint64
	anchor  float64 // anchor accuracy
}

// Version is the version Decide answers with.
func (l *Learner) Version() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.current.id
}

// Versions lists the versions RestoreVersion can reach, oldest first.
func (l *Learner) Versions() []uint64 {
	l.busy.Lock()
	defer l.busy.Unlock()
	return l.hist.ids()
}

// AnchorAccuracy is the current version's accuracy on the anchor set.
func (l *Learner) AnchorAccuracy() float64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.current.anchor
}

// syncWork puts v's adapter on the work fork, when it holds another.
func (l *Learner) syncWork(v *version) error {
	if l.workGen == v.gen {
		return nil
	}
	if _, err := l.work.RestoreAdapter(v.adapter); err != nil {
		return fmt.Errorf("ror: %w", err)
	}
	l.workGen = v.gen
	return nil
}

// install makes v the weights Decide answers with.
func (l *Learner) install(v *version) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v.gen != l.current.gen {
		if _, err := l.live.RestoreAdapter(v.adapter); err != nil {
			return fmt.Errorf("ror: %w", err)
		}
	}
	l.current = v
	return nil
}

// commit records v as a new version and installs it; the one it replaces is
// what Undo goes back to.
func (l *Learner) commit(v *version) error {
	prev := l.current
	v.id = l.hist.peekID()
	if err := l.install(v); err != nil {
		return err
	}
	l.hist.add(v, prev)
	return nil
}

// Undo goes back to the version that was current before the last change (a
// kept step or a restore), bit for bit; repeated, it walks further back,
// skipping versions the history no longer holds.
func (l *Learner) Undo() (Event, error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	began := time.Now()
	ev := Event{Kind: KindUndo, VersionBefore: l.current.id, VersionAfter: l.current.id, AnchorBefore: l.current.anchor}
	prev, err := l.hist.back(l.install)
	if err != nil {
		return ev, err
	}
	ev.VersionAfter, ev.AnchorAfter = prev.id, prev.anchor
	ev.MS = ms(time.Since(began))
	return ev, nil
}

// RestoreVersion installs version id, bit for bit; Undo returns to the one
// before.
func (l *Learner) RestoreVersion(id uint64) (Event, error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	began := time.Now()
	ev := Event{Kind: KindRestore, VersionBefore: l.current.id, VersionAfter: l.current.id, AnchorBefore: l.current.anchor}
	prev := l.current
	v, err := l.hist.restore(id, prev, l.install)
	if err != nil {
		return ev, err
	}
	ev.AnchorAfter = v.anchor
	if v == prev {
		return ev, nil
	}
	ev.VersionAfter = v.id
	ev.MS = ms(time.Since(began))
	return ev, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
