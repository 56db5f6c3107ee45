package ror

import (
	"fmt"
	"slices"
)

// history is a learner's versions: the first (the model as it was given) for
// good, the later ones up to a limit, and the stack Undo walks back. Both
// learners, decisions and chat, keep theirs in one.
type history[V any] struct {
	versions []*V // oldest first
	undo     []*V // what Undo goes back to, most recent last
	nextID   uint64
	limit    int // versions kept besides the first
	id       func(*V) uint64
}

func newHistory[V any](first *V, limit int, id func(*V) uint64) history[V] {
	return history[V]{versions: []*V{first}, nextID: 1, limit: limit, id: id}
}

// peekID is the id the next added version gets.
func (h *history[V]) peekID() uint64 { return h.nextID }

// add records v, made from prev, as the newest version: Undo returns to prev.
// Versions past the limit leave, oldest first (never the first), and with
// them their places on the undo stack.
func (h *history[V]) add(v, prev *V) {
	h.nextID++
	h.versions = append(h.versions, v)
	h.undo = append(h.undo, prev)
	if extra := len(h.versions) - 1 - h.limit; extra > 0 {
		gone := slices.Clone(h.versions[1 : 1+extra])
		h.versions = append(h.versions[:1], h.versions[1+extra:]...)
		h.undo = slices.DeleteFunc(h.undo, func(u *V) bool { return slices.Contains(gone, u) })
	}
}

// lastUndo is what Undo would install; dropUndo takes it off once installed.
func (h *history[V]) lastUndo() (*V, bool) {
	if len(h.undo) == 0 {
		return nil, false
	}
	return h.undo[len(h.undo)-1], true
}

func (h *history[V]) dropUndo() { h.undo = h.undo[:len(h.undo)-1] }

// restored notes that a restore replaced prev: Undo returns to it.
func (h *history[V]) restored(prev *V) { h.undo = append(h.undo, prev) }

// back installs the version Undo returns to, and takes it off the stack once
// installed.
func (h *history[V]) back(install func(*V) error) (*V, error) {
	prev, ok := h.lastUndo()
	if !ok {
		return nil, ErrNothingToUndo
	}
	if err := install(prev); err != nil {
		return nil, err
	}
	h.dropUndo()
	return prev, nil
}

// restore installs version id in place of cur, which Undo then returns to. It
// returns the version, cur itself when that is already id.
func (h *history[V]) restore(id uint64, cur *V, install func(*V) error) (*V, error) {
	v := h.find(id)
	if v == nil {
		return nil, fmt.Errorf("%w: %d", ErrVersion, id)
	}
	if v == cur {
		return v, nil
	}
	if err := install(v); err != nil {
		return nil, err
	}
	h.restored(cur)
	return v, nil
}

// find is the version with id, or nil.
func (h *history[V]) find(id uint64) *V {
	if i := slices.IndexFunc(h.versions, func(v *V) bool { return h.id(v) == id }); i >= 0 {
		return h.versions[i]
	}
	return nil
}

// ids lists the versions' ids, oldest first.
func (h *history[V]) ids() []uint64 {
	out := make([]uint64, len(h.versions))
	for i, v := range h.versions {
		out[i] = h.id(v)
	}
	return out
}
