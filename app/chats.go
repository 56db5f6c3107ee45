package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/store"
)

// ChatSpec starts a chat: the model as the registry names it, an optional adapter
// folder, a system prompt and sampling settings.
type ChatSpec struct {
	Model     string
	Adapter   string // an adapter folder (mlx-lm layout); empty for the bare model
	System    string
	Title     string
	MaxTokens int // 0: 512
	Sampling  inference.SampleOptions
	Raw       bool // continue the text as is, without the chat template
}

// ChatSession is one conversation: its messages are stored as they happen, the
// model's KV cache is reused across turns, and the adapter version of each reply
// is kept with it. The session's model is a fork of the workspace's loaded model:
// it shares the base weights and has its own adapter stack, so adaptation in one
// chat never changes another.
type ChatSession struct {
	ID   int64
	Info store.Model

	w     *Workspace
	mu    sync.Mutex // one turn at a time
	model *inference.Model
	rep   *inference.Replier
	sess  *inference.Session
	msgs  []chat.Message
	opts  inference.ReplyOptions
	raw   bool
}

// Turn is one reply.
type Turn struct {
	MessageID int64 // the stored reply
	Text      string
	Stats     inference.Stats
}

// StartChat opens a new conversation and records it.
func (w *Workspace) StartChat(ctx context.Context, spec ChatSpec) (*ChatSession, error) {
	base, info, err := w.SharedModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	m := base.Fork()
	if spec.Adapter != "" {
		if _, err := inference.LoadAdapter(m, spec.Adapter); err != nil {
			return nil, err
		}
	}
	rep, err := inference.LoadReplier(m, info.Path)
	if err != nil {
		return nil, err
	}
	if !spec.Raw && rep.Template == nil {
		return nil, fmt.Errorf("model %s has no chat template", info.Name)
	}
	if spec.MaxTokens == 0 {
		spec.MaxTokens = 512
	}
	if err := spec.Sampling.Validate(); err != nil {
		return nil, err
	}
	title := spec.Title
	if title == "" {
		title = "Chat with " + info.Name
	}
	id, err := w.Store.CreateChat(ctx, store.Chat{Title: title, Model: info.Name})
	if err != nil {
		return nil, err
	}
	c := &ChatSession{ID: id, Info: info, w: w, model: m, rep: rep, sess: inference.NewSession(m), raw: spec.Raw,
		opts: inference.ReplyOptions{MaxTokens: spec.MaxTokens, Sampling: spec.Sampling, AddSpecialTokens: spec.Raw}}
	if spec.System != "" {
		c.msgs = append(c.msgs, chat.Message{Role: "system", Content: spec.System})
		if _, err := w.Store.AddMessage(ctx, store.Message{ChatID: id, Role: "system", Content: spec.System}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Model is the chat's own model: adaptation methods change its adapter stack.
func (c *ChatSession) Model() *inference.Model { return c.model }

// Messages returns the conversation so far.
func (c *ChatSession) Messages() []chat.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chat.Message(nil), c.msgs...)
}

// Send adds the user's text, streams the reply to onText (which may be nil) and
// stores both. A cancelled reply keeps the text produced so far and returns the
// context's error.
func (c *ChatSession) Send(ctx context.Context, text string, onText func(string)) (Turn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	store := c.w.Store
	if _, err := store.AddMessage(ctx, storeMessage(c.ID, "user", text, 0, nil)); err != nil {
		return Turn{}, err
	}
	c.msgs = append(c.msgs, chat.Message{Role: "user", Content: text})
	var reply string
	var st inference.Stats
	var err error
	if c.raw {
		reply, st, err = c.rep.ReplyText(ctx, c.sess, text, c.opts, onText)
	} else {
		reply, st, err = c.rep.Reply(ctx, c.sess, c.msgs, c.opts, onText)
	}
	c.msgs = append(c.msgs, chat.Message{Role: "assistant", Content: reply})
	id, serr := store.AddMessage(context.WithoutCancel(ctx), storeMessage(c.ID, "assistant", reply, int(st.AdapterVersion), replyStats(st)))
	if err == nil {
		err = serr
	}
	return Turn{MessageID: id, Text: reply, Stats: st}, err
}

// Reset forgets the conversation (not the stored messages) and the KV cache.
func (c *ChatSession) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := 0
	if len(c.msgs) > 0 && c.msgs[0].Role == "system" {
		keep = 1
	}
	c.msgs = c.msgs[:keep]
	c.sess.Reset()
}

func storeMessage(chatID int64, role, content string, version int, st *store.MessageStats) store.Message {
	return store.Message{ChatID: chatID, Role: role, Content: content, AdapterVersion: version, Stats: st}
}

// SharedModel returns the workspace's loaded copy of a model, loading it on first
// use: chats and adaptation share one set of base weights.
func (w *Workspace) SharedModel(ctx context.Context, name string) (*inference.Model, store.Model, error) {
	info, err := w.ResolveModel(ctx, name)
	if err != nil {
		return nil, info, err
	}
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	if m := w.loaded[info.Path]; m != nil {
		return m, info, nil
	}
	m, err := inference.Load(info.Path, w.Backend)
	if err != nil {
		return nil, info, err
	}
	if w.loaded == nil {
		w.loaded = map[string]*inference.Model{}
	}
	w.loaded[info.Path] = m
	return m, info, nil
}

func replyStats(st inference.Stats) *store.MessageStats {
	return &store.MessageStats{PromptTokens: st.PromptTokens, Tokens: st.GeneratedTokens, TokensPerSec: st.DecodeTPS,
		TTFTms: float64(st.TimeToFirstToken.Microseconds()) / 1000, KVBytes: st.KVBytes, PeakBytes: st.PeakMemory, StopReason: st.StopReason}
}
