package store

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestChatMemories: versions count up per chat, the newest is the chat's
// memory, undo drops it, old versions beyond keep go, and deleting the chat
// deletes its memory.
func TestChatMemories(t *testing.T) {
	s, ctx := open(t), context.Background()
	chat, err := s.CreateChat(ctx, Chat{Title: "memory", Model: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ChatMemory(ctx, chat); !errors.Is(err, ErrNotFound) {
		t.Fatalf("memory of a new chat: %v, want ErrNotFound", err)
	}
	for i := 1; i <= 4; i++ {
		v, err := s.AddChatMemory(ctx, ChatMemory{ChatID: chat, Memory: "/m/deltamem.safetensors", State: []byte{byte(i), 0, 1}, Writes: int64(10 * i), Norm: float64(i)}, 3)
		if err != nil || v != i {
			t.Fatalf("version %d: got %d, %v", i, v, err)
		}
	}
	got, err := s.ChatMemory(ctx, chat)
	if err != nil || got.Version != 4 || !bytes.Equal(got.State, []byte{4, 0, 1}) || got.Writes != 40 || got.Norm != 4 || got.Memory != "/m/deltamem.safetensors" {
		t.Fatalf("newest: %+v, %v", got, err)
	}
	vs, err := s.ChatMemoryVersions(ctx, chat)
	if err != nil || len(vs) != 3 || vs[0].Version != 4 || vs[2].Version != 2 {
		t.Fatalf("versions kept: %+v, %v; want 4, 3, 2", vs, err)
	}
	if err := s.DropChatMemory(ctx, chat); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ChatMemory(ctx, chat); err != nil || got.Version != 3 || got.State[0] != 3 {
		t.Fatalf("after undo: %+v, %v; want version 3", got, err)
	}
	if v, err := s.AddChatMemory(ctx, ChatMemory{ChatID: chat, State: []byte{9}}, 0); err != nil || v != 4 {
		t.Fatalf("after undo the next version is %d (%v), want 4", v, err)
	}
	if _, err := s.AddChatMemory(ctx, ChatMemory{ChatID: chat}, 0); err == nil {
		t.Fatal("a memory without a state was stored")
	}
	if err := s.DeleteChat(ctx, chat); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ChatMemory(ctx, chat); !errors.Is(err, ErrNotFound) {
		t.Fatalf("memory of a deleted chat: %v, want ErrNotFound", err)
	}
	if err := s.DropChatMemory(ctx, chat); !errors.Is(err, ErrNotFound) {
		t.Fatalf("undo with no memory: %v, want ErrNotFound", err)
	}
}

// TestMigrationAddsChatMemories: a file made by the first schema, with a chat
// in it, opens at the current version with the chat kept and chat_memories
// usable.
func TestMigrationAddsChatMemories(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inloop.db")
	rawSQL(t, path, migrations[0], "PRAGMA user_version = 1",
		"INSERT INTO chats (title, model, created_at) VALUES ('old', 'demo', 1700000000000)")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var version int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil || version != SchemaVersion() {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion())
	}
	chats, err := s.Chats(ctx)
	if err != nil || len(chats) != 1 || chats[0].Title != "old" {
		t.Fatalf("chats after the upgrade: %+v, %v", chats, err)
	}
	if _, err := s.AddChatMemory(ctx, ChatMemory{ChatID: chats[0].ID, State: []byte{1}}, 0); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM chat_memories").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v)", n, err)
	}
}
