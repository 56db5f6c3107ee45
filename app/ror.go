package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"

	"github.com/inloop/inloop/adapt/ror"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/decide"
)

// Reinforce-or-retrain on a saved decision model, through the Workspace: the
// Decide screen's try-it box (and any caller) opens a DecisionSession, asks it
// for decisions, and gives thumbs. Every thumb is an adaptation event in the
// store (method ror) with its wall time and the versions it went between; a
// change the anchor check accepts is saved to the model's folder at once, so
// what was learnt survives a restart, and Undo / RestoreVersion go back bit for
// bit (the folder is rewritten too).

// RoROptions steer reinforce-or-retrain; the zero value is the defaults.
type RoROptions = ror.Options

// RoREvent is what one thumb, undo or restore did.
type RoREvent = ror.Event

// The kinds of RoREvent.
const (
	RoRReinforce = ror.KindReinforce
	RoRRetrain   = ror.KindRetrain
	RoRRollback  = ror.KindRollback
	RoRRecord    = ror.KindRecord
	RoRUndo      = ror.KindUndo
	RoRRestore   = ror.KindRestore
)

// ErrNothingToUndo: Undo found no change to take back.
var ErrNothingToUndo = ror.ErrNothingToUndo

// DecisionSession is a decision model loaded with RoR. Its methods may be called
// from several goroutines.
type DecisionSession struct {
	w     *Workspace
	Dir   string
	Model *decide.Model // the model as loaded: task, calibration, split
	l     *ror.Learner

	mu     sync.Mutex
	events map[uint64]int64 // version after → the store event that made it, for marking undone
}

// OpenDecisionSession loads the decision model saved in dir with RoR over it.
// The anchor set the rollback check scores is the model's held-out split of the
// rows it was trained on (never trained on), so the rows must still be there.
func (w *Workspace) OpenDecisionSession(ctx context.Context, dir string, opts RoROptions) (*DecisionSession, error) {
	dir = filepath.Clean(dir)
	m, err := w.LoadDecisionModel(ctx, dir, "")
	if err != nil {
		return nil, err
	}
	anchor, err := w.anchorRows(ctx, dir, m)
	if err != nil {
		return nil, err
	}
	base, tok, err := w.forkBackbone(ctx, m.Meta.Base.Name)
	if err != nil {
		return nil, err
	}
	l, err := ror.New(ctx, m, base, tok, anchor, opts)
	if err != nil {
		return nil, err
	}
	return &DecisionSession{w: w, Dir: dir, Model: m, l: l, events: map[uint64]int64{}}, nil
}

// maxAnchorRows caps the anchor set: each of its rows is a forward pass when
// the session opens (its features are cached after), and 200 rows still
// resolve a drop of one point in accuracy to two rows.
const maxAnchorRows = 200

// spread picks n of rows evenly spaced, keeping their order (all when there
// are no more than n).
func spread(rows []decide.Row, n int) []decide.Row {
	if len(rows) <= n {
		return rows
	}
	out := make([]decide.Row, n)
	for i := range out {
		out[i] = rows[i*len(rows)/n]
	}
	return out
}

// anchorRows finds the rows the model in dir was trained on (the spec of the
// run that wrote it) and returns their held-out part.
func (w *Workspace) anchorRows(ctx context.Context, dir string, m *decide.Model) ([]decide.Row, error) {
	if m.Split == nil || len(m.Split.Heldout) == 0 {
		return nil, fmt.Errorf("%s has no held-out split to check corrections against", dir)
	}
	runs, err := w.Store.Runs(ctx, store.RunFilter{Kind: store.KindDecide})
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if filepath.Clean(r.Output) != dir || r.Status != store.StatusDone {
			continue
		}
		var spec DecideSpec
		if json.Unmarshal(r.Params, &spec) != nil || spec.Task == "" {
			continue // an evaluation, not the training run
		}
		rep, err := ReadDecisionRows(m.Task, spec.Task, spec.Rows, true)
		if err != nil {
			return nil, fmt.Errorf("the rows %s was trained on: %w", dir, err)
		}
		held := m.Split.HeldoutRows(rep.Rows)
		if len(held) == 0 {
			return nil, fmt.Errorf("none of the held-out rows of %s are in %s any more", dir, orSample(spec.Rows))
		}
		return spread(held, maxAnchorRows), nil
	}
	return nil, fmt.Errorf("no finished training run in this workspace wrote %s, so its held-out rows are unknown", dir)
}

// Decide answers every question of the task about state, with the feedback
// history's adjustment applied to the confidence (the gate).
func (s *DecisionSession) Decide(ctx context.Context, state string) ([]Decision, error) {
	out, cut, err := s.l.Decide(ctx, []string{state})
	if err != nil {
		return nil, err
	}
	if cut[0] {
		return out[0], fmt.Errorf("the text is longer than the model reads (%d tokens): its end was cut", s.Model.Meta.MaxSeqLength)
	}
	return out[0], nil
}

// ThumbUp confirms answer to question about state: reinforce, no weights change.
func (s *DecisionSession) ThumbUp(ctx context.Context, state, question, answer string) (RoREvent, error) {
	ev, err := s.l.ThumbUp(ctx, state, question, answer)
	return s.record(ctx, ev, err)
}

// ThumbDown says the answer to question about state is wrong; correct, when
// given, is the right option and the model retrains on it (a step the anchor
// check accepted is saved to the folder).
func (s *DecisionSession) ThumbDown(ctx context.Context, state, question, correct string) (RoREvent, error) {
	ev, err := s.l.ThumbDown(ctx, state, question, correct)
	return s.record(ctx, ev, err)
}

// Undo goes back to the version before the last accepted change.
func (s *DecisionSession) Undo(ctx context.Context) (RoREvent, error) {
	ev, err := s.l.Undo()
	return s.record(ctx, ev, err)
}

// RestoreVersion installs an earlier version by its number (Versions).
func (s *DecisionSession) RestoreVersion(ctx context.Context, v uint64) (RoREvent, error) {
	ev, err := s.l.RestoreVersion(v)
	return s.record(ctx, ev, err)
}

// Version is the version answering now; Versions all that can be restored.
func (s *DecisionSession) Version() uint64    { return s.l.Version() }
func (s *DecisionSession) Versions() []uint64 { return s.l.Versions() }

// AnchorAccuracy is the current version's accuracy on the held-out anchor set.
func (s *DecisionSession) AnchorAccuracy() float64 { return s.l.AnchorAccuracy() }

// record stores ev and, when the weights changed, saves the new version to the
// folder. Undo and restore mark the events they take back as undone.
func (s *DecisionSession) record(ctx context.Context, ev RoREvent, err error) (RoREvent, error) {
	if err != nil && ev.VersionBefore == ev.VersionAfter {
		return ev, err
	}
	bg := context.WithoutCancel(ctx)
	changed := ev.VersionAfter != ev.VersionBefore
	if changed {
		if serr := s.l.Save(s.Dir); serr != nil {
			err = errors.Join(err, fmt.Errorf("the new version is in use but could not be saved: %w", serr))
		}
	}
	detail := rorDetail(ev, s.Dir)
	id, serr := s.w.Store.AddAdaptationEvent(bg, store.AdaptationEvent{Model: s.Model.Meta.Base.Name, Method: store.MethodRoR, MS: ev.MS,
		VersionBefore: int(ev.VersionBefore), VersionAfter: int(ev.VersionAfter), Detail: detail})
	if serr != nil {
		return ev, errors.Join(err, serr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Kind {
	case RoRRetrain:
		s.events[ev.VersionAfter] = id
	case RoRUndo, RoRRestore:
		// The changes made after the version now in use are taken back (and
		// those up to it stand again, after a restore forward).
		for v, eid := range s.events {
			_ = s.w.Store.MarkUndone(bg, eid, v > ev.VersionAfter)
		}
	}
	return ev, err
}

// SetThreshold sets the confidence below which question escalates, in the
// session's model and in its folder.
func (s *DecisionSession) SetThreshold(question string, threshold float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Model.SetThreshold(question, threshold); err != nil {
		return err
	}
	return s.Model.SaveCalibration(s.Dir)
}

// rorDetail is ev as an event's stored detail. An anchor figure that does not
// exist yet (NaN: no anchor set) is left out, since JSON has no NaN.
func rorDetail(ev RoREvent, folder string) json.RawMessage {
	finiteOrNil := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	raw, err := json.Marshal(struct {
		RoREvent
		AnchorBefore *float64 `json:"anchor_before,omitempty"`
		AnchorAfter  *float64 `json:"anchor_after,omitempty"`
		Loss         *float64 `json:"loss,omitempty"`
		LossAfter    *float64 `json:"loss_after,omitempty"`
		Folder       string   `json:"folder,omitempty"`
	}{ev, finiteOrNil(ev.AnchorBefore), finiteOrNil(ev.AnchorAfter), finiteOrNil(ev.Loss), finiteOrNil(ev.LossAfter), folder})
	if err != nil { // every field is a plain value now; say so rather than store nothing
		raw, _ = json.Marshal(map[string]string{"kind": string(ev.Kind), "error": err.Error()})
	}
	return raw
}
