package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/inloop/inloop/adapt/ror"
	"github.com/inloop/inloop/adapt/ttt"
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
	// TTT, when set, takes test-time training steps on each of the user's
	// messages before answering it, on a temporary adapter thrown away after the
	// reply (adapt/ttt). Each is stored as an adaptation event.
	TTT *ttt.Options
	// Memory, when set, turns on δ-mem: an online memory that keeps what the
	// context drops, stored with the chat (deltamem.go).
	Memory *ChatMemory
	// KV is how the conversation's keys and values are stored: KV.Bits 8 or 4
	// quantizes them (mlx-lm's --kv-bits), 16 rounds them to bfloat16, for long
	// chats on little memory.
	KV inference.CacheOptions
	// StopWhenFull makes a turn that no longer fits the model's context fail with
	// ErrChatFull instead of dropping the oldest turns.
	StopWhenFull bool
	// Resume continues a stored chat (its id) instead of starting one: its
	// messages come back, System and Title are the stored ones, and its
	// replies take feedback again (chat_resume.go). With Memory, the memory
	// goes on from the chat's newest stored state.
	Resume int64
}

// ErrChatFull is returned by Send when the conversation no longer fits the model's
// context and the chat was started with StopWhenFull.
var ErrChatFull = errors.New("the conversation no longer fits the model's context")

// DroppedNotice is what a person is told, once per chat, when older turns stop
// fitting the model's context.
const DroppedNotice = "older messages no longer fit the model's context and were dropped"

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
	stop  bool // StopWhenFull
	ttt   *ttt.Options
	told  bool // the dropped-turns notice was given

	memory *chatMemory // δ-mem, nil when off (deltamem.go)

	replies map[int64]chatReply // the replies feedback can reach, by message (chat_ror.go)
	learner *ror.ChatLearner    // reinforce-or-retrain, made at the first feedback
	learnt  []learnt            // what the learner holds, priced as prompt tokens
}

// Turn is one reply.
type Turn struct {
	MessageID int64 // the stored reply
	Text      string
	Stats     inference.Stats
	Dropped   int         // messages dropped from the front of the conversation before this turn
	Notice    string      // DroppedNotice the first time turns are dropped in this chat
	TTT       *ttt.Result // the test-time training before this reply, when on
	Memory    *MemoryTurn // what δ-mem wrote during this turn, when on
	// Confidence is the reply's mean token probability adjusted by the
	// feedback this chat's model has had (chat_ror.go); LowConfidence says it
	// is below the gate, so a person should check the reply.
	Confidence    float64
	LowConfidence bool
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
	if spec.MaxTokens < 0 {
		return nil, fmt.Errorf("max tokens %d: a reply needs room for at least one token", spec.MaxTokens)
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
	var stored []store.Message
	if spec.Resume != 0 {
		var from int64
		if stored, from, err = w.resumable(ctx, spec, info); err != nil {
			return nil, err
		}
		if spec.Memory != nil && spec.Memory.From == 0 && from != 0 {
			mc := *spec.Memory
			mc.From = from
			spec.Memory = &mc
		}
	}
	mem, err := w.loadChatMemory(ctx, spec, m, info)
	if err != nil {
		return nil, err
	}
	sess, err := inference.NewSessionWith(m, spec.KV)
	if err != nil {
		return nil, err
	}
	if spec.TTT != nil && !spec.Raw {
		if k := spec.TTT.FirstBlock(m.Blocks()); k > 0 {
			if err := sess.Cache().KeepHidden(k); err != nil {
				return nil, err
			}
		}
	}
	id := spec.Resume
	if id == 0 {
		if id, err = w.Store.CreateChat(ctx, store.Chat{Title: title, Model: info.Name}); err != nil {
			return nil, err
		}
	}
	c := &ChatSession{ID: id, Info: info, w: w, model: m, rep: rep, sess: sess, raw: spec.Raw, stop: spec.StopWhenFull, ttt: spec.TTT,
		opts:    inference.ReplyOptions{MaxTokens: spec.MaxTokens, Sampling: spec.Sampling, AddSpecialTokens: spec.Raw, LogProb: true},
		memory:  mem,
		replies: map[int64]chatReply{}}
	if err := c.attachMemory(ctx); err != nil {
		return nil, err
	}
	if spec.Resume != 0 {
		if err := c.loadCorrections(); err != nil {
			return nil, err
		}
		c.restore(stored)
		return c, nil
	}
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

// KV is how the chat stores its keys and values.
func (c *ChatSession) KV() KVCache { return c.sess.Cache().Options() }

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
	defer c.w.chatBusy()()
	c.mu.Lock()
	defer c.mu.Unlock()
	var turn Turn
	msgs := append(c.msgs[:len(c.msgs):len(c.msgs)], chat.Message{Role: "user", Content: text})
	var ids []int
	if !c.raw {
		var err error
		if ids, msgs, turn.Dropped, err = c.fit(msgs); err != nil {
			return turn, err // nothing stored: the chat goes on as it was
		}
	}
	store := c.w.Store
	if _, err := store.AddMessage(context.WithoutCancel(ctx), storeMessage(c.ID, "user", text, 0, nil)); err != nil {
		return turn, err
	}
	if turn.Dropped > 0 && !c.told {
		turn.Notice, c.told = DroppedNotice, true
	}
	c.msgs = msgs
	var err error
	sess, done := c.sess, func() error { return nil }
	if c.ttt != nil && !c.raw {
		if sess, done, turn.TTT, err = c.testTimeTrain(ctx, text, ids); err != nil {
			return turn, err
		}
	}
	if c.raw {
		turn.Text, turn.Stats, err = c.rep.ReplyText(ctx, sess, text, c.opts, onText)
	} else {
		turn.Text, turn.Stats, err = c.rep.ReplyTokens(ctx, sess, ids, c.opts, onText)
	}
	if derr := done(); err == nil {
		err = derr
	}
	c.msgs = append(c.msgs, chat.Message{Role: "assistant", Content: turn.Text})
	var serr error
	turn.MessageID, serr = store.AddMessage(context.WithoutCancel(ctx), storeMessage(c.ID, "assistant", turn.Text, int(turn.Stats.AdapterVersion), replyStats(turn.Stats)))
	if err == nil {
		err = serr
	}
	if turn.TTT != nil && serr == nil {
		c.recordTTT(ctx, turn)
	}
	if serr == nil {
		c.keepReply(&turn, ids, nil, text)
	}
	if merr := c.recordMemory(ctx, &turn); err == nil && serr == nil {
		err = merr
	}
	return turn, err
}

// testTimeTrain adapts a fork of the chat's model on the user's message and
// returns a session of it for this reply, and the function that throws the
// temporary adapter away. prompt is the turn's prompt (nil in a raw chat).
func (c *ChatSession) testTimeTrain(ctx context.Context, text string, prompt []int) (*inference.Session, func() error, *ttt.Result, error) {
	toks, err := c.rep.Tokenizer.Encode(text, false)
	if err != nil {
		return nil, nil, nil, err
	}
	applied, res, err := ttt.Adapt(ctx, c.model, [][]int{toks}, *c.ttt, nil)
	if errors.Is(err, ttt.ErrNoContext) { // a message too short to learn from
		return c.sess, func() error { return nil }, &res, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if res.Skipped {
		return c.sess, applied.Done, &res, nil
	}
	sess, err := inference.NewSessionWith(applied.Model(), c.sess.Cache().Options())
	if err != nil {
		applied.Done()
		return nil, nil, nil, err
	}
	c.seed(ctx, sess, prompt)
	return sess, applied.Done, &res, nil
}

// seedTTT turns seed off (tests: the reply it gives is the unseeded one's).
var seedTTT = true

// seed starts the session of the adapted fork from the chat's own: the fork
// differs from the chat's model only in the blocks the temporary adapter
// covers, so the chat's session is brought up to the prompt (what a turn
// without test-time training computes: only what it does not hold yet) and
// the fork's starts from the hidden states it keeps, running just the
// adapted blocks over the conversation. Without it the fork would run every
// block over the whole conversation on every turn. On any failure the fork's
// session is left empty, and its prefill computes everything; a cancel stops
// both the catching up and the seeding at their next chunk, and the reply's
// Generate then stops at once. A chat with
// δ-mem is not seeded: its memory reads the chat's session as it runs, and a
// turn with test-time training has never run it.
func (c *ChatSession) seed(ctx context.Context, sess *inference.Session, prompt []int) {
	k := c.ttt.FirstBlock(c.model.Blocks())
	if !seedTTT || k == 0 || len(prompt) < 2 || c.memory != nil {
		return
	}
	if _, _, err := c.sess.PrefillContext(ctx, prompt[:len(prompt)-1]); err != nil {
		return
	}
	if _, err := sess.SeedFromContext(ctx, c.sess, k); err != nil {
		sess.Reset()
	}
}

// recordTTT stores a test-time training step as an adaptation event.
func (c *ChatSession) recordTTT(ctx context.Context, turn Turn) {
	r := turn.TTT
	losses := make([]float64, len(r.Steps))
	for i, s := range r.Steps {
		losses[i] = s.Loss
	}
	detail, _ := json.Marshal(map[string]any{"skipped": r.Skipped, "steps": len(r.Steps), "losses": losses, "pieces": r.Pieces})
	v := int(r.BaseVersion)
	_, _ = c.w.Store.AddAdaptationEvent(context.WithoutCancel(ctx), store.AdaptationEvent{Model: c.Info.Name, ChatID: c.ID, MessageID: turn.MessageID,
		Method: store.MethodTTT, MS: r.TotalMS, VersionBefore: v, VersionAfter: v, Detail: detail})
}

// fit renders msgs and, while the prompt leaves too little room for a reply in the
// model's context, drops the oldest turn: never the system prompt, never the turn
// being asked. It returns the prompt, the messages kept and how many were dropped.
// A last turn that cannot fit even alone is refused with both numbers.
func (c *ChatSession) fit(msgs []chat.Message) ([]int, []chat.Message, int, error) {
	limit := c.model.ContextLength()
	reserve := max(1, min(c.opts.MaxTokens, limit/4)) // room kept for the reply
	dropped := 0
	for {
		ids, err := c.rep.Prompt(msgs, c.opts.Render)
		if err != nil {
			return nil, nil, 0, err
		}
		if limit <= 0 || len(ids)+reserve <= limit {
			return ids, msgs, dropped, nil
		}
		first := 0
		if msgs[0].Role == "system" {
			first = 1
		}
		if first >= len(msgs)-1 { // only the turn being asked is left
			if len(ids) < limit {
				return ids, msgs, dropped, nil // it fits; the reply may stop at the limit
			}
			return nil, nil, 0, fmt.Errorf("%w: this message needs %d tokens and the model reads at most %d", ErrChatFull, len(ids), limit)
		}
		if c.stop {
			return nil, nil, 0, fmt.Errorf("%w (%d tokens of %d)", ErrChatFull, len(ids), limit)
		}
		// Drop one whole exchange: the oldest message and everything up to the
		// next user message.
		end := first + 1
		for end < len(msgs)-1 && msgs[end].Role != "user" {
			end++
		}
		msgs = append(msgs[:first:first], msgs[end:]...)
		dropped += end - first
	}
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
	m, err := w.loadFolder(info.Path)
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
		TTFTms: float64(st.TimeToFirstToken.Microseconds()) / 1000, KVBytes: st.KVBytes, PeakBytes: st.PeakMemory, StopReason: st.StopReason, LogProb: st.LogProb}
}
