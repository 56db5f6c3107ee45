package app

import (
	"context"
	"errors"
	"slices"

	"github.com/inloop/inloop/adapt/ror"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/store"
)

// Reinforce-or-retrain in a chat (adapt/ror's ChatLearner): every reply
// carries a confidence, its mean token probability adjusted by the thumbs
// the chat has had; a thumb up keeps the reply as a confirmed example, a
// thumb down with a corrected text spends a gradient step or a few on the
// correction, checked against confirmed replies and rolled back when it hurts
// them. The learner trains an adapter of its own on top of the chat's stack,
// made at the first feedback and seeded with the replies people confirmed in
// earlier chats with the same model. Every thumb is stored as feedback and as
// an adaptation event; UndoFeedback takes the last kept change back.

// maxKeptReplies caps the replies a chat keeps the prompts of for feedback.
const maxKeptReplies = 64

// maxSeedAnchors caps the confirmed replies from earlier chats a learner
// starts with.
const maxSeedAnchors = 16

// chatReply is what feedback on a reply needs: the prompt the model read, the
// reply and its mean token probability.
type chatReply struct {
	prompt []int          // nil until needed for a reply restored with its chat
	conv   []chat.Message // the conversation before it, to render prompt from
	text   string
	prob   float64
	asked  string // the user's message it answers
}

// learnt is an example the chat's feedback adapter holds: what showing it to
// the model in the prompt instead would cost.
type learnt struct {
	version uint64 // the version that learnt it (a confirmation: the version it was given under)
	tokens  int
}

// exampleOverhead is the template's tokens around a worked example (roles,
// turn markers), counted when pricing an example in the prompt.
const exampleOverhead = 10

// keepReply remembers the reply of turn for feedback and fills its confidence.
// A restored reply passes its conversation (conv) with a nil prompt: the
// prompt is rendered when feedback needs it.
func (c *ChatSession) keepReply(turn *Turn, prompt []int, conv []chat.Message, asked string) {
	p := turn.Stats.TokenProbability()
	turn.Confidence, turn.LowConfidence = p, p < ror.DefaultChatThreshold
	if c.learner != nil {
		turn.Confidence, turn.LowConfidence = c.learner.Adjusted(p)
	}
	if c.raw || (len(prompt) == 0 && conv == nil) || turn.Text == "" {
		return
	}
	if len(c.replies) >= maxKeptReplies {
		oldest := turn.MessageID
		for id := range c.replies {
			oldest = min(oldest, id)
		}
		delete(c.replies, oldest)
	}
	c.replies[turn.MessageID] = chatReply{prompt: prompt, conv: conv, text: turn.Text, prob: p, asked: asked}
}

// replyTokens is text as the model writes a reply: its tokens and the
// template's end of turn.
func (c *ChatSession) replyTokens(text string) ([]int, error) {
	ids, err := c.rep.Tokenizer.Encode(text, false)
	if err != nil {
		return nil, err
	}
	var eos []int
	if c.rep.Template != nil {
		eos = c.rep.Template.EOSTokens()
	}
	if len(eos) == 0 {
		eos = c.rep.StopTokens
	}
	if len(eos) > 0 {
		ids = append(ids, eos[0])
	}
	return ids, nil
}

// Feedback records a thumb (+1 or -1) on one of this chat's replies, with the
// corrected text for a thumb down when the user gave one, and learns from it.
// The learning runs beside the chat: a reply in progress goes on with the
// weights it started with, and a kept correction is put in place between two
// replies.
func (c *ChatSession) Feedback(ctx context.Context, messageID int64, thumb int, correction string) (RoREvent, error) {
	defer c.w.chatBusy()()
	if _, err := c.w.AddFeedback(ctx, messageID, thumb, correction); err != nil {
		return RoREvent{}, err
	}
	c.mu.Lock()
	r, ok := c.replies[messageID]
	l, fresh := c.learner, false
	if ok && l == nil {
		var err error
		if l, err = ror.NewChat(c.model, &c.mu, ror.ChatOptions{}); err != nil {
			c.mu.Unlock()
			return RoREvent{}, err
		}
		c.learner, fresh = l, true
	}
	c.mu.Unlock()
	if !ok {
		return RoREvent{}, errors.New("the feedback is stored, but that reply is no longer in this chat's memory, so nothing was learnt from it")
	}
	if fresh {
		if seed := c.w.confirmedReplies(ctx, c); len(seed) > 0 {
			if err := l.AddAnchor(ctx, seed...); err != nil {
				return RoREvent{}, err
			}
		}
	}
	if r.prompt == nil {
		var err error
		if r.prompt, err = c.rep.Prompt(r.conv, c.opts.Render); err != nil {
			return RoREvent{}, err
		}
	}
	reply, err := c.replyTokens(r.text)
	if err != nil {
		return RoREvent{}, err
	}
	asked, err := c.rep.Tokenizer.Encode(r.asked, false)
	if err != nil {
		return RoREvent{}, err
	}
	ex := ror.ChatExample{Prompt: r.prompt, Reply: reply}
	var ev RoREvent
	if thumb > 0 {
		ev, err = l.ThumbUp(ctx, ex, r.prob)
	} else {
		var fix []int
		if correction != "" {
			if fix, err = c.replyTokens(correction); err != nil {
				return RoREvent{}, err
			}
		}
		ev, err = l.ThumbDown(ctx, ex, r.prob, fix)
		ex.Reply = fix
	}
	if err != nil {
		return ev, err
	}
	var serr error
	if ev.Kind == RoRRetrain {
		serr = c.saveCorrections(l)
	}
	c.mu.Lock()
	switch ev.Kind {
	case RoRReinforce, RoRRetrain:
		c.learnt = append(c.learnt, learnt{version: ev.VersionAfter, tokens: len(asked) + len(ex.Reply) + exampleOverhead})
	}
	c.mu.Unlock()
	return ev, errors.Join(serr, c.recordRoR(ctx, messageID, ev))
}

// UndoFeedback takes back the last change feedback made to this chat's model.
func (c *ChatSession) UndoFeedback(ctx context.Context) (RoREvent, error) {
	c.mu.Lock()
	l := c.learner
	c.mu.Unlock()
	if l == nil {
		return RoREvent{}, ErrNothingToUndo
	}
	ev, err := l.Undo()
	if err != nil {
		return ev, err
	}
	serr := c.saveCorrections(l)
	c.mu.Lock()
	c.learnt = slices.DeleteFunc(c.learnt, func(l learnt) bool { return l.version > ev.VersionAfter })
	c.mu.Unlock()
	evs, _ := c.w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: c.ID, Method: store.MethodRoR})
	for _, e := range evs { // newest first
		if e.VersionAfter == int(ev.VersionBefore) && e.VersionBefore != e.VersionAfter && !e.Undone {
			_ = c.w.Store.MarkUndone(context.WithoutCancel(ctx), e.ID, true)
			break
		}
	}
	return ev, errors.Join(serr, c.recordRoR(ctx, 0, ev))
}

// FeedbackVersion is the version of the chat's feedback adapter (0 before any
// correction was kept).
func (c *ChatSession) FeedbackVersion() uint64 {
	c.mu.Lock()
	l := c.learner
	c.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.Version()
}

func (c *ChatSession) recordRoR(ctx context.Context, messageID int64, ev RoREvent) error {
	detail := rorDetail(ev, "")
	_, err := c.w.Store.AddAdaptationEvent(context.WithoutCancel(ctx), store.AdaptationEvent{Model: c.Info.Name, ChatID: c.ID, MessageID: messageID,
		Method: store.MethodRoR, MS: ev.MS, VersionBefore: int(ev.VersionBefore), VersionAfter: int(ev.VersionAfter), Detail: detail})
	return err
}

// confirmedReplies are replies people gave a thumb up in earlier chats with
// c's model, as examples in c's template: the anchor set a new learner starts
// with. Unreadable chats are passed over.
func (w *Workspace) confirmedReplies(ctx context.Context, c *ChatSession) []ror.ChatExample {
	if c.raw {
		return nil
	}
	chats, err := w.Store.Chats(ctx)
	if err != nil {
		return nil
	}
	var out []ror.ChatExample
	for _, ch := range chats {
		if ch.ID == c.ID || ch.Model != c.Info.Name {
			continue
		}
		msgs, err := w.Store.Messages(ctx, ch.ID)
		if err != nil {
			continue
		}
		var conv []chat.Message
		for _, m := range msgs {
			if m.Role == "assistant" && len(out) < maxSeedAnchors && confirmed(ctx, w.Store, m.ID) {
				prompt, perr := c.rep.Prompt(conv, c.opts.Render)
				reply, rerr := c.replyTokens(m.Content)
				if perr == nil && rerr == nil {
					out = append(out, ror.ChatExample{Prompt: prompt, Reply: reply})
				}
			}
			conv = append(conv, chat.Message{Role: m.Role, Content: m.Content})
		}
		if len(out) >= maxSeedAnchors {
			break
		}
	}
	return out
}

// confirmed says whether a message's latest feedback is a thumb up.
func confirmed(ctx context.Context, s *store.Store, messageID int64) bool {
	fs, err := s.Feedback(ctx, messageID)
	if err != nil || len(fs) == 0 {
		return false
	}
	return fs[len(fs)-1].Thumb > 0
}

// Learnt is what the chat's feedback adapter holds — the confirmed and
// corrected replies it learnt from — priced as worked examples in the prompt
// instead: their tokens, and the KV-cache bytes those would take on every
// turn.
func (c *ChatSession) Learnt() (examples, tokens int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.learnt {
		tokens += l.tokens
	}
	return len(c.learnt), tokens, int64(tokens) * kvBytesPerToken(c.model.Config())
}
