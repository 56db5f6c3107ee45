package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Chat is one conversation with a model.
type Chat struct {
	ID      int64
	Title   string
	Model   string
	Created time.Time
}

// CreateChat records a chat and returns its id.
func (s *Store) CreateChat(ctx context.Context, c Chat) (int64, error) {
	if c.Created.IsZero() {
		c.Created = now()
	}
	id, err := s.insert(ctx, "INSERT INTO chats (title, model, created_at) VALUES (?, ?, ?)", c.Title, c.Model, millis(c.Created))
	if err != nil {
		return 0, fmt.Errorf("store: create chat %q: %w", c.Title, err)
	}
	return id, nil
}

func scanChat(r scanner) (Chat, error) {
	var c Chat
	var created sql.NullInt64
	err := r.Scan(&c.ID, &c.Title, &c.Model, &created)
	c.Created = fromMillis(created)
	return c, err
}

// Chat returns one chat, or ErrNotFound.
func (s *Store) Chat(ctx context.Context, id int64) (Chat, error) {
	c, err := one(scanChat(s.r.QueryRowContext(ctx, "SELECT id, title, model, created_at FROM chats WHERE id = ?", id)))
	if err != nil {
		return Chat{}, fmt.Errorf("store: chat %d: %w", id, err)
	}
	return c, nil
}

// Chats lists the chats, newest first.
func (s *Store) Chats(ctx context.Context) ([]Chat, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT id, title, model, created_at FROM chats ORDER BY id DESC")
	cs, err := collect(rows, err, scanChat)
	if err != nil {
		return nil, fmt.Errorf("store: chats: %w", err)
	}
	return cs, nil
}

// RenameChat sets a chat's title.
func (s *Store) RenameChat(ctx context.Context, id int64, title string) error {
	if err := s.exec(ctx, "UPDATE chats SET title = ? WHERE id = ?", title, id); err != nil {
		return fmt.Errorf("store: rename chat %d: %w", id, err)
	}
	return nil
}

// DeleteChat removes a chat with its messages and their feedback. Its
// adaptation events stay, without the reference: the weights they changed
// outlive the chat, and undo needs the history.
func (s *Store) DeleteChat(ctx context.Context, id int64) error {
	if err := s.exec(ctx, "DELETE FROM chats WHERE id = ?", id); err != nil {
		return fmt.Errorf("store: delete chat %d: %w", id, err)
	}
	return nil
}

// Message is one turn of a chat.
type Message struct {
	ID             int64
	ChatID         int64
	Role           string // system, user, assistant
	Content        string
	AdapterVersion int           // the adapter version a reply was generated with; 0 for none
	Stats          *MessageStats // of a generated reply; nil for the user's turns
	Confidence     *float64      // calibrated confidence of the answer, when known
	Created        time.Time
}

// MessageStats describes how a reply was generated.
type MessageStats struct {
	PromptTokens int             `json:"prompt_tokens,omitempty"`
	Tokens       int             `json:"tokens"`
	TokensPerSec float64         `json:"tokens_per_sec"`
	TTFTms       float64         `json:"ttft_ms"`               // time to first token
	KVBytes      int64           `json:"kv_bytes,omitempty"`    // the KV cache after the reply
	PeakBytes    int64           `json:"peak_bytes,omitempty"`  // peak memory while generating
	StopReason   string          `json:"stop_reason,omitempty"` // eos, stop string, length, cancelled
	LogProb      float64         `json:"log_prob,omitempty"`    // Σ log p of the reply's tokens under the model
	Extra        json.RawMessage `json:"extra,omitempty"`       // method-specific figures
}

const messageCols = "id, chat_id, role, content, adapter_version, stats, confidence, created_at"

func scanMessage(r scanner) (Message, error) {
	var m Message
	var version, created sql.NullInt64
	var stats sql.NullString
	var conf sql.NullFloat64
	if err := r.Scan(&m.ID, &m.ChatID, &m.Role, &m.Content, &version, &stats, &conf, &created); err != nil {
		return m, err
	}
	m.AdapterVersion, m.Created = int(version.Int64), fromMillis(created)
	if conf.Valid {
		m.Confidence = &conf.Float64
	}
	if stats.Valid {
		m.Stats = new(MessageStats)
		return m, json.Unmarshal([]byte(stats.String), m.Stats)
	}
	return m, nil
}

// AddMessage appends a message to its chat and returns its id.
func (s *Store) AddMessage(ctx context.Context, m Message) (int64, error) {
	if m.Created.IsZero() {
		m.Created = now()
	}
	stats, err := marshal(m.Stats)
	if err != nil {
		return 0, fmt.Errorf("store: chat %d: message stats: %w", m.ChatID, err)
	}
	var conf any
	if m.Confidence != nil {
		conf = *m.Confidence
	}
	id, err := s.insert(ctx, `INSERT INTO messages (chat_id, role, content, adapter_version, stats, confidence, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		m.ChatID, m.Role, m.Content, nullID(int64(m.AdapterVersion)), stats, conf, millis(m.Created))
	if err != nil {
		return 0, fmt.Errorf("store: chat %d: add message: %w", m.ChatID, err)
	}
	return id, nil
}

// Message returns one message, or ErrNotFound.
func (s *Store) Message(ctx context.Context, id int64) (Message, error) {
	m, err := one(scanMessage(s.r.QueryRowContext(ctx, "SELECT "+messageCols+" FROM messages WHERE id = ?", id)))
	if err != nil {
		return Message{}, fmt.Errorf("store: message %d: %w", id, err)
	}
	return m, nil
}

// Messages lists a chat's messages in the order they were added.
func (s *Store) Messages(ctx context.Context, chatID int64) ([]Message, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+messageCols+" FROM messages WHERE chat_id = ? ORDER BY id", chatID)
	ms, err := collect(rows, err, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("store: chat %d: messages: %w", chatID, err)
	}
	return ms, nil
}

// Feedback is the user's verdict on a reply: a thumb up (+1) or down (-1),
// with an optional corrected answer.
type Feedback struct {
	ID         int64
	MessageID  int64
	Thumb      int // +1 or -1
	Correction string
	Created    time.Time
}

// AddFeedback records feedback on a message and returns its id.
func (s *Store) AddFeedback(ctx context.Context, f Feedback) (int64, error) {
	if f.Thumb != 1 && f.Thumb != -1 {
		return 0, fmt.Errorf("store: message %d: feedback thumb %d, want +1 or -1", f.MessageID, f.Thumb)
	}
	if f.Created.IsZero() {
		f.Created = now()
	}
	id, err := s.insert(ctx, "INSERT INTO feedback (message_id, thumb, correction, created_at) VALUES (?, ?, ?, ?)",
		f.MessageID, f.Thumb, f.Correction, millis(f.Created))
	if err != nil {
		return 0, fmt.Errorf("store: message %d: add feedback: %w", f.MessageID, err)
	}
	return id, nil
}

// Feedback lists the feedback on a message, oldest first.
func (s *Store) Feedback(ctx context.Context, messageID int64) ([]Feedback, error) {
	rows, err := s.r.QueryContext(ctx,
		"SELECT id, message_id, thumb, correction, created_at FROM feedback WHERE message_id = ? ORDER BY id", messageID)
	fs, err := collect(rows, err, func(r scanner) (Feedback, error) {
		var f Feedback
		var created sql.NullInt64
		err := r.Scan(&f.ID, &f.MessageID, &f.Thumb, &f.Correction, &created)
		f.Created = fromMillis(created)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: message %d: feedback: %w", messageID, err)
	}
	return fs, nil
}
