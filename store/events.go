package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Adaptation methods, the values of AdaptationEvent.Method.
const (
	MethodTTT      = "ttt"      // test-time training: a temporary adapter, discarded after the reply
	MethodRoR      = "ror"      // reinforce-or-retrain on feedback
	MethodTAO      = "tao"      // reward-scored training on unlabeled prompts
	MethodDeltaMem = "deltamem" // the δ-mem state of a session was written
)

// AdaptationEvent records one adaptation step of the inference loop: what ran,
// how long it took, and which adapter versions it went between, so it can be
// shown, measured and undone.
type AdaptationEvent struct {
	ID            int64
	Model         string
	ChatID        int64 // 0 when not tied to a chat, or the chat was deleted
	MessageID     int64 // the message that triggered it; 0 for none
	Method        string
	MS            float64 // wall time of the step
	VersionBefore int
	VersionAfter  int // equal to VersionBefore when the step was rolled back or kept no change
	Detail        json.RawMessage
	Undone        bool
	Created       time.Time
}

const eventCols = `id, model, chat_id, message_id, method, ms, version_before, version_after, detail, undone, created_at`

func scanEvent(r scanner) (AdaptationEvent, error) {
	var e AdaptationEvent
	var chatID, messageID, created sql.NullInt64
	var detail sql.NullString
	err := r.Scan(&e.ID, &e.Model, &chatID, &messageID, &e.Method, &e.MS, &e.VersionBefore, &e.VersionAfter,
		&detail, &e.Undone, &created)
	e.ChatID, e.MessageID = chatID.Int64, messageID.Int64
	e.Detail, e.Created = fromJSON(detail), fromMillis(created)
	return e, err
}

// AddAdaptationEvent records an event and returns its id.
func (s *Store) AddAdaptationEvent(ctx context.Context, e AdaptationEvent) (int64, error) {
	if e.Method == "" {
		return 0, fmt.Errorf("store: add adaptation event: empty method")
	}
	if e.Created.IsZero() {
		e.Created = now()
	}
	id, err := s.insert(ctx, `INSERT INTO adaptation_events (model, chat_id, message_id, method, ms,
			version_before, version_after, detail, undone, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Model, nullID(e.ChatID), nullID(e.MessageID), e.Method, e.MS, e.VersionBefore, e.VersionAfter,
		rawJSON(e.Detail), e.Undone, millis(e.Created))
	if err != nil {
		return 0, fmt.Errorf("store: add %s event: %w", e.Method, err)
	}
	return id, nil
}

// EventFilter selects adaptation events; zero fields select everything.
type EventFilter struct {
	ChatID int64
	Model  string
	Method string
	Limit  int // at most this many, newest first
}

// AdaptationEvents lists events, newest first.
func (s *Store) AdaptationEvents(ctx context.Context, f EventFilter) ([]AdaptationEvent, error) {
	q := "SELECT " + eventCols + " FROM adaptation_events WHERE 1=1"
	var args []any
	if f.ChatID != 0 {
		q += " AND chat_id = ?"
		args = append(args, f.ChatID)
	}
	if f.Model != "" {
		q += " AND model = ?"
		args = append(args, f.Model)
	}
	if f.Method != "" {
		q += " AND method = ?"
		args = append(args, f.Method)
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	es, err := collect(rows, err, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("store: adaptation events: %w", err)
	}
	return es, nil
}

// AdaptationEvent returns one event, or ErrNotFound.
func (s *Store) AdaptationEvent(ctx context.Context, id int64) (AdaptationEvent, error) {
	e, err := one(scanEvent(s.r.QueryRowContext(ctx, "SELECT "+eventCols+" FROM adaptation_events WHERE id = ?", id)))
	if err != nil {
		return AdaptationEvent{}, fmt.Errorf("store: adaptation event %d: %w", id, err)
	}
	return e, nil
}

// MarkUndone records that an event's change was undone (undone true) or
// redone (false).
func (s *Store) MarkUndone(ctx context.Context, id int64, undone bool) error {
	if err := s.exec(ctx, "UPDATE adaptation_events SET undone = ? WHERE id = ?", undone, id); err != nil {
		return fmt.Errorf("store: adaptation event %d: mark undone: %w", id, err)
	}
	return nil
}
