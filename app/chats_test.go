package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inloop/inloop/adapt/ttt"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/store"
)

func TestChatSessionStoresTurnsAndReusesCache(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: tinyModelDir(t), System: "be brief", MaxTokens: 6, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	first, err := c.Send(ctx, "hello there", func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if streamed.String() != first.Text || first.Stats.GeneratedTokens == 0 {
		t.Errorf("streamed %q, reply %q, %d tokens", streamed.String(), first.Text, first.Stats.GeneratedTokens)
	}
	second, err := c.Send(ctx, "and again", nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Stats.ReusedTokens == 0 {
		t.Errorf("the second turn reused no cached tokens: %+v", second.Stats)
	}
	msgs, err := w.Store.Messages(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,user,assistant" {
		t.Fatalf("stored roles %s", got)
	}
	if msgs[2].Stats == nil || msgs[2].Stats.Tokens != first.Stats.GeneratedTokens || msgs[2].Content != first.Text || msgs[2].ID != first.MessageID {
		t.Errorf("stored reply %+v, want %q with %d tokens", msgs[2], first.Text, first.Stats.GeneratedTokens)
	}
	// A second chat on the same model shares its base weights but not its adapters.
	c2, err := w.StartChat(ctx, ChatSpec{Model: c.Info.Path, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Model() == c.Model() {
		t.Error("two chats share one adapter stack")
	}
}

func TestChatCommandReadsStdin(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	in := strings.NewReader("hello\n/reset\nhi\n/exit\n")
	code := Run(context.Background(), []string{"chat", "--data-dir", dir, "--backend", "cpu", "--model", tinyModelDir(t), "--max-tokens", "4", "--temp", "0"}, in, &out, &errb)
	if code != 0 {
		t.Fatalf("chat exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "(conversation cleared)") || strings.Count(errb.String(), "generated") != 2 {
		t.Errorf("chat output:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	w := openTestWorkspace(t, dir)
	defer w.Close()
	chats, err := w.Store.Chats(context.Background())
	if err != nil || len(chats) != 1 {
		t.Fatalf("chats %v, %v", chats, err)
	}
	msgs, _ := w.Store.Messages(context.Background(), chats[0].ID)
	if len(msgs) != 4 {
		t.Errorf("stored %d messages, want 4", len(msgs))
	}
}

func TestFeedbackIsStored(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: tinyModelDir(t), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(ctx, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddFeedback(ctx, turn.MessageID, -1, "say hello back"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddFeedback(ctx, turn.MessageID, 0, ""); err == nil {
		t.Error("a thumb of 0 was accepted")
	}
	fb, err := w.Store.Feedback(ctx, turn.MessageID)
	if err != nil || len(fb) != 1 || fb[0].Thumb != -1 || fb[0].Correction != "say hello back" {
		t.Errorf("feedback %+v, %v", fb, err)
	}
}

// Fifty turns on the demo model, whose context is 512 tokens: older turns are
// dropped (with one notice), the chat never fails, the KV cache stays within the
// context, and a reply after a drop is what a fresh session gives.
func TestFiftyTurnChatSurvivesTheContext(t *testing.T) {
	if testing.Short() {
		t.Skip("a 50-turn chat")
	}
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", System: "You answer questions about hackers.", MaxTokens: 40, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Model().Config()
	limit := c.Model().ContextLength()
	fullCache := int64(2*cfg.NumHiddenLayers*cfg.NumKeyValueHeads*cfg.Head()*4) * int64(limit)
	notices, drops, checked := 0, 0, false
	var early int64
	for i := range 50 {
		turn, err := c.Send(ctx, fmt.Sprintf("Question %d: what does a hacker do with a computer all day?", i), nil)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if turn.Notice != "" {
			notices++
		}
		if turn.Stats.KVBytes > fullCache {
			t.Fatalf("turn %d: KV cache %d bytes, more than a full context's %d", i, turn.Stats.KVBytes, fullCache)
		}
		if turn.Dropped > 0 {
			drops++
			if !checked {
				checked = true
				msgs := c.Messages()
				fresh, _, err := c.rep.Reply(ctx, nil, msgs[:len(msgs)-1], c.opts, nil)
				if err != nil || fresh != turn.Text {
					t.Errorf("after a drop the chat replied %q, a fresh session %q (%v)", turn.Text, fresh, err)
				}
			}
		}
		if i == 10 {
			early = liveArrays()
		}
	}
	if notices != 1 || drops < 10 {
		t.Errorf("%d notices and %d turns with drops, want 1 notice and many drops", notices, drops)
	}
	if late := liveArrays(); late > early+early/2+(1<<20) {
		t.Errorf("live arrays grew from %d bytes at turn 10 to %d at turn 50", early, late)
	}
	msgs, _ := w.Store.Messages(ctx, c.ID)
	if len(msgs) != 101 {
		t.Errorf("stored %d messages, want all 101", len(msgs))
	}
}

func liveArrays() int64 {
	for range 3 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	a, _, _ := cpu.MemoryDetail()
	return a
}

func TestTooLongMessageIsRefusedAndTheChatGoesOn(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(ctx, strings.Repeat("hacker ", 600), nil)
	if !errors.Is(err, ErrChatFull) || !strings.Contains(err.Error(), "at most 512") {
		t.Fatalf("a 600-word message: %v", err)
	}
	if _, err := c.Send(ctx, "hello", nil); err != nil {
		t.Fatalf("the chat did not go on: %v", err)
	}
	if n := len(c.Messages()); n != 2 {
		t.Errorf("%d messages in the conversation, want the 2 of the turn that fit", n)
	}
}

func TestGenerateRefusesAPromptLongerThanTheContext(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"generate", "--data-dir", t.TempDir(), "--backend", "cpu", "--model", "demo", "--raw", "--prompt", strings.Repeat("hacker ", 700)}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "tokens and this model reads at most 512") || strings.Contains(errb.String(), "inference:") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// With test-time training on, each reply is preceded by steps on the user's
// message, on a temporary adapter: the chat's own adapters never change, and the
// steps are stored as an adaptation event.
func TestChatWithTestTimeTraining(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8, Sampling: inference.SampleOptions{Temperature: 0}, TTT: &ttt.Options{Steps: 2}})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Model().AdapterVersion()
	turn, err := c.Send(ctx, "The lighthouse keeper of Varnholm island counts ships every night and writes their names in a green book.", nil)
	if err != nil {
		t.Fatal(err)
	}
	if turn.TTT == nil || len(turn.TTT.Steps) != 2 || turn.TTT.TotalMS <= 0 {
		t.Fatalf("TTT result %+v", turn.TTT)
	}
	if after := c.Model().AdapterVersion(); after != before {
		t.Errorf("the chat's adapter version moved from %d to %d", before, after)
	}
	evs, err := w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: c.ID})
	if err != nil || len(evs) != 1 || evs[0].Method != store.MethodTTT || evs[0].MessageID != turn.MessageID || evs[0].MS <= 0 {
		t.Errorf("events %+v, %v", evs, err)
	}
}

func TestChatRefusesNegativeMaxTokens(t *testing.T) {
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	if _, err := w.StartChat(context.Background(), ChatSpec{Model: "demo", MaxTokens: -5}); err == nil || !strings.Contains(err.Error(), "max tokens -5") {
		t.Errorf("max tokens -5: %v", err)
	}
}

// A chat with a quantized KV cache answers, keeps reusing its cache across
// turns, and holds a fraction of the exact cache's bytes for the same
// conversation (the demo's 48-wide heads padded to 64: 8 bits and a float32
// scale and bias per 64 values is 37.5% of float32).
func TestChatQuantizedKV(t *testing.T) {
	ctx := context.Background()
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	bytes := map[int]int64{}
	for _, bits := range []int{0, 8} {
		c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 12, KV: KVCache{Bits: bits}, Sampling: inference.SampleOptions{Temperature: 0}})
		if err != nil {
			t.Fatal(err)
		}
		if c.KV().Bits != bits {
			t.Fatalf("asked for %d bits, the chat stores %+v", bits, c.KV())
		}
		if _, err := c.Send(ctx, "What is a hacker?", nil); err != nil {
			t.Fatal(err)
		}
		turn, err := c.Send(ctx, "Tell me more about the jargon file.", nil)
		if err != nil {
			t.Fatal(err)
		}
		if turn.Text == "" || turn.Stats.ReusedTokens == 0 {
			t.Fatalf("%d bits: second reply %q reused %d tokens", bits, turn.Text, turn.Stats.ReusedTokens)
		}
		bytes[bits] = turn.Stats.KVBytes
	}
	if r := float64(bytes[8]) / float64(bytes[0]); r > 0.5 {
		t.Errorf("the 8-bit chat holds %d bytes of KV cache, the exact one %d (%.2f×)", bytes[8], bytes[0], r)
	}
	if _, err := w.StartChat(ctx, ChatSpec{Model: "demo", KV: KVCache{Bits: 7}}); err == nil {
		t.Errorf("a 7-bit KV cache was accepted")
	}
	// With test-time training the reply comes from a session of the adapted
	// model, which keeps the chat's cache options.
	c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 8, KV: KVCache{Bits: 4}, TTT: &TTTOptions{}, Sampling: inference.SampleOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(ctx, "The jargon file is a glossary of hacker slang, collected over many years.", nil)
	if err != nil {
		t.Fatal(err)
	}
	if turn.TTT == nil || len(turn.TTT.Steps) == 0 || turn.Text == "" {
		t.Errorf("a 4-bit chat with test-time training: reply %q, training %+v", turn.Text, turn.TTT)
	}
}

// With test-time training on the last blocks only, a turn's adapted session
// starts from the hidden states the chat's own session keeps: its prefill
// reuses the conversation, and the reply is the one an unseeded session gives.
func TestChatTestTimeTrainingSeeds(t *testing.T) {
	ctx := context.Background()
	run := func(seeded bool) []Turn {
		seedTTT = seeded
		defer func() { seedTTT = true }()
		w := openTestWorkspace(t, t.TempDir())
		defer w.Close()
		c, err := w.StartChat(ctx, ChatSpec{Model: "demo", MaxTokens: 12, Sampling: inference.SampleOptions{Temperature: 0}, TTT: &ttt.Options{Steps: 1, Layers: 2}})
		if err != nil {
			t.Fatal(err)
		}
		var turns []Turn
		for _, msg := range []string{"The lighthouse keeper of Varnholm island counts ships every night.", "She writes their names in a green book.", "What does she write?"} {
			turn, err := c.Send(ctx, msg, nil)
			if err != nil {
				t.Fatal(err)
			}
			turns = append(turns, turn)
		}
		return turns
	}
	seeded, plain := run(true), run(false)
	for i := range seeded {
		if seeded[i].Text != plain[i].Text {
			t.Errorf("turn %d: seeded reply %q, unseeded %q", i, seeded[i].Text, plain[i].Text)
		}
		if plain[i].Stats.ReusedTokens != 0 {
			t.Errorf("turn %d: an unseeded adapted session reused %d tokens", i, plain[i].Stats.ReusedTokens)
		}
		if want := seeded[i].Stats.PromptTokens - 1; seeded[i].Stats.ReusedTokens != want {
			t.Errorf("turn %d: the seeded session reused %d of %d prompt tokens, want %d", i, seeded[i].Stats.ReusedTokens, seeded[i].Stats.PromptTokens, want)
		}
	}
}
