package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ChatMemory is one version of a chat's online memory (δ-mem): the state as
// adapt/deltamem encodes it, and the figures shown without decoding it.
type ChatMemory struct {
	ChatID  int64
	Version int    // 1, 2, ... per chat; the newest is the chat's memory
	Memory  string // the trained memory file the state belongs with
	State   []byte
	Writes  int64
	Norm    float64
	Created time.Time
}

const memoryCols = "chat_id, version, memory, state, writes, norm, created_at"

func scanMemory(r scanner) (ChatMemory, error) {
	var m ChatMemory
	var created sql.NullInt64
	err := r.Scan(&m.ChatID, &m.Version, &m.Memory, &m.State, &m.Writes, &m.Norm, &created)
	m.Created = fromMillis(created)
	return m, err
}

// AddChatMemory stores a new version of a chat's memory and returns its number,
// one more than the newest so far. Versions beyond the newest keep are deleted
// (keep <= 0 keeps every version).
func (s *Store) AddChatMemory(ctx context.Context, m ChatMemory, keep int) (int, error) {
	if m.State == nil {
		return 0, fmt.Errorf("store: chat %d memory: no state", m.ChatID)
	}
	if m.Created.IsZero() {
		m.Created = now()
	}
	var version int
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) + 1 FROM chat_memories WHERE chat_id = ?", m.ChatID).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO chat_memories ("+memoryCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			m.ChatID, version, m.Memory, m.State, m.Writes, m.Norm, millis(m.Created)); err != nil {
			return err
		}
		if keep > 0 {
			_, err := tx.ExecContext(ctx, "DELETE FROM chat_memories WHERE chat_id = ? AND version <= ?", m.ChatID, version-keep)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: chat %d memory: %w", m.ChatID, err)
	}
	return version, nil
}

// ChatMemory returns the newest version of a chat's memory, or ErrNotFound.
func (s *Store) ChatMemory(ctx context.Context, chatID int64) (ChatMemory, error) {
	m, err := one(scanMemory(s.r.QueryRowContext(ctx, "SELECT "+memoryCols+" FROM chat_memories WHERE chat_id = ? ORDER BY version DESC LIMIT 1", chatID)))
	if err != nil {
		return ChatMemory{}, fmt.Errorf("store: chat %d memory: %w", chatID, err)
	}
	return m, nil
}

// ChatMemoryVersions lists a chat's memory versions, newest first, without
// their states.
func (s *Store) ChatMemoryVersions(ctx context.Context, chatID int64) ([]ChatMemory, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT chat_id, version, memory, X'', writes, norm, created_at FROM chat_memories WHERE chat_id = ? ORDER BY version DESC", chatID)
	ms, err := collect(rows, err, scanMemory)
	if err != nil {
		return nil, fmt.Errorf("store: chat %d memory versions: %w", chatID, err)
	}
	return ms, nil
}

// DropChatMemory deletes the newest version of a chat's memory (undo), so the
// one before it is the chat's memory again; ErrNotFound when there is none.
func (s *Store) DropChatMemory(ctx context.Context, chatID int64) error {
	err := s.exec(ctx, "DELETE FROM chat_memories WHERE chat_id = ? AND version = (SELECT MAX(version) FROM chat_memories WHERE chat_id = ?)", chatID, chatID)
	if err != nil {
		return fmt.Errorf("store: chat %d memory: undo: %w", chatID, err)
	}
	return nil
}
