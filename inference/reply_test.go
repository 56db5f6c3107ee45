package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
)

// The scripted model: ids 0-255 are the bytes of a byte-level BPE tokenizer (no
// merges), ids from 256 the script's longer tokens, then three special tokens.
const (
	scriptVocab = 320
	imStart     = 316
	imEnd       = 317 // the template's EOS
	endOfText   = 318 // the config's EOS
	noEnd       = -1  // the script starts over after its last token
)

// gpt2Byte is the printable rune byte-level BPE writes for byte b.
func gpt2Byte(b byte) rune {
	if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
		return rune(b)
	}
	n := 0
	for c := 0; c < int(b); c++ {
		if !('!' <= c && c <= '~' || 0xA1 <= c && c <= 0xAC || 0xAE <= c && c <= 0xFF) {
			n++
		}
	}
	return rune(0x100 + n)
}

func byteLevel(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		sb.WriteRune(gpt2Byte(s[i]))
	}
	return sb.String()
}

// scripted returns a model and tokenizer whose greedy continuation of any prompt
// ending in "\n" is the tokens of script (raw bytes, one string per token), then
// end, then the script again. Every layer's output projections are zero, so the
// residual stream is the token's embedding: one-hot for each token with a
// successor, and the head maps it to that successor. Script tokens must be
// distinct; one-byte tokens are the byte's own id.
func scripted(t *testing.T, script []string, end int) (*Model, *tokenizer.Tokenizer) {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[byteLevel(string([]byte{byte(b)}))] = b
	}
	next := 256
	ids := make([]int, len(script))
	for i, s := range script {
		if len(s) == 1 {
			ids[i] = int(s[0])
		} else {
			vocab[byteLevel(s)] = next
			ids[i] = next
			next++
		}
		if slices.Contains(ids[:i], ids[i]) || ids[i] == '\n' {
			t.Fatalf("script token %q repeats or is the prompt's last", s)
		}
	}
	for ; next < imStart; next++ {
		vocab[fmt.Sprintf("unused%d", next)] = next
	}
	vocab["unused319"] = 319
	added := []map[string]any{}
	for id, s := range map[int]string{imStart: "<|im_start|>", imEnd: "<|im_end|>", endOfText: "<|endoftext|>"} {
		added = append(added, map[string]any{"id": id, "content": s, "special": true, "normalized": false,
			"single_word": false, "lstrip": false, "rstrip": false})
	}
	byteLevelCfg := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	raw, _ := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": nil,
		"pre_tokenizer": byteLevelCfg, "post_processor": nil, "decoder": byteLevelCfg,
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{}, "byte_fallback": false},
	})
	tok, err := tokenizer.FromJSON(raw)
	if err != nil {
		t.Fatal(err)
	}

	cfg := Config{
		ModelType: "llama", HiddenSize: 64, IntermediateSize: 64, NumHiddenLayers: 1,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-5,
		RopeTheta: 10000, VocabSize: scriptVocab, MaxPositionEmbeddings: 512,
		EOSTokenID: TokenIDs{endOfText},
	}
	successor := map[int]int{'\n': ids[0]}
	for i, id := range ids {
		if i+1 < len(ids) {
			successor[id] = ids[i+1]
		} else if end >= 0 {
			successor[id] = end
			successor[end] = ids[0]
		} else {
			successor[id] = ids[0]
		}
	}
	h := cfg.HiddenSize
	if len(successor) > h {
		t.Fatalf("a script of %d tokens needs more than %d hidden dimensions", len(successor), h)
	}
	embed, head := make([]float32, scriptVocab*h), make([]float32, scriptVocab*h)
	slot := 0
	for _, src := range slices.Sorted(func(yield func(int) bool) {
		for k := range successor {
			if !yield(k) {
				return
			}
		}
	}) {
		embed[src*h+slot] = 1
		head[successor[src]*h+slot] = 1
		slot++
	}
	b := cpu(t)
	m := NewRandom(cfg, 41, b)
	params := map[string]*mx.Array{
		"model.embed_tokens.weight": mx.FromData(b, mx.Float32, embed, scriptVocab, h),
		"lm_head.weight":            mx.FromData(b, mx.Float32, head, scriptVocab, h),
		"model.norm.weight":         mx.Ones(h),
	}
	for name, p := range m.Params() {
		if strings.HasSuffix(name, "o_proj.weight") || strings.HasSuffix(name, "down_proj.weight") {
			params[name] = mx.Zeros(p.Shape()...)
		}
	}
	sm, err := m.WithParams(params)
	if err != nil {
		t.Fatal(err)
	}
	return sm, tok
}

func scriptedReplier(t *testing.T, script []string, end int) *Replier {
	m, tok := scripted(t, script, end)
	return NewReplier(m, tok, chat.ChatML(chat.SpecialTokens{EOS: "<|im_end|>", EOSIDs: []int{imEnd}}))
}

var hi = []chat.Message{{Role: "user", Content: "hi"}}

// reply runs Reply and checks what every streamed reply must satisfy: the pieces
// are whole UTF-8 characters and add up to the returned text.
func reply(t *testing.T, r *Replier, ctx context.Context, opts ReplyOptions) (string, Stats, error) {
	t.Helper()
	var pieces []string
	text, st, err := r.Reply(ctx, nil, hi, opts, func(s string) {
		if s == "" || !utf8.ValidString(s) {
			t.Errorf("onText got %q: want a non-empty piece of whole characters", s)
		}
		pieces = append(pieces, s)
	})
	if got := strings.Join(pieces, ""); got != text {
		t.Errorf("streamed %q, returned %q", got, text)
	}
	return text, st, err
}

func TestReplyEndsAtStopToken(t *testing.T) {
	r := scriptedReplier(t, []string{"Hel", "lo", " wor", "ld"}, imEnd)
	if !slices.Contains(r.StopTokens, imEnd) || !slices.Contains(r.StopTokens, endOfText) {
		t.Errorf("stop tokens %v, want the template's %d and the config's %d", r.StopTokens, imEnd, endOfText)
	}
	ids, err := r.Prompt(hi, chat.RenderOptions{})
	if err != nil || ids[len(ids)-1] != '\n' || !slices.Contains(ids, imStart) {
		t.Fatalf("prompt %v, %v: want the rendered ChatML ending in the assistant's turn", ids, err)
	}
	text, st, err := reply(t, r, context.Background(), ReplyOptions{MaxTokens: 50})
	if err != nil || text != "Hello world" || st.StopReason != StopToken || st.GeneratedTokens != 4 {
		t.Errorf("got %q (%s, %d tokens, %v), want %q at the stop token after 4", text, st.StopReason, st.GeneratedTokens, err, "Hello world")
	}
	// The config's EOS ends it too.
	r = scriptedReplier(t, []string{"ab", "cd"}, endOfText)
	if text, st, _ := reply(t, r, context.Background(), ReplyOptions{}); text != "abcd" || st.StopReason != StopToken {
		t.Errorf("got %q (%s), want %q at the config's EOS", text, st.StopReason, "abcd")
	}
}

func TestReplyStopStrings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []string
		stops  []string
		want   string
	}{
		{"split over three tokens", []string{"Hel", "lo ", "<|", "END", "|> more"}, []string{"<|END|>"}, "Hello "},
		{"a false start is released", []string{"x<", "|y", "<|", "EN", "D|>"}, []string{"<|END|>"}, "x<|y"},
		{"inside one token", []string{"ab", "cSTOPd"}, []string{"STOP"}, "abc"},
		{"the earliest of two", []string{"one", " two", " three"}, []string{"three", "two"}, "one "},
		{"starting on a split character", []string{"ab\xe2", "\x82\xac", "E", "ND"}, []string{"€END"}, "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := scriptedReplier(t, tc.script, noEnd)
			text, st, err := reply(t, r, context.Background(), ReplyOptions{MaxTokens: 30, StopStrings: tc.stops})
			if err != nil || text != tc.want || st.StopReason != StopString {
				t.Errorf("got %q (%s, %v), want %q at a stop string", text, st.StopReason, err, tc.want)
			}
		})
	}
}

// A character whose bytes come in several tokens is handed out whole, with or
// without a stop string holding text back.
func TestReplyUTF8AcrossTokens(t *testing.T) {
	script := []string{"\xe2", "\x82", "\xac!", " caf\xc3", "\xa9", " \xf0\x9f", "\x98", "\x80."}
	for _, stops := range [][]string{nil, {"XYZ"}} {
		r := scriptedReplier(t, script, imEnd)
		text, _, err := reply(t, r, context.Background(), ReplyOptions{StopStrings: stops})
		if want := "€! café 😀."; err != nil || text != want {
			t.Errorf("stop strings %q: got %q, %v; want %q", stops, text, err, want)
		}
	}
}

func TestReplyMaxTokens(t *testing.T) {
	r := scriptedReplier(t, []string{"a", "b", "c"}, noEnd)
	text, st, err := reply(t, r, context.Background(), ReplyOptions{MaxTokens: 7})
	if err != nil || text != "abcabca" || st.StopReason != StopMaxTokens || st.GeneratedTokens != 7 {
		t.Errorf("got %q (%s, %d tokens, %v), want %q after 7 tokens", text, st.StopReason, st.GeneratedTokens, err, "abcabca")
	}
	// Text held back as the possible start of a stop string is handed out at the end.
	r = scriptedReplier(t, []string{"ab", "<|", "EN"}, noEnd)
	text, _, _ = reply(t, r, context.Background(), ReplyOptions{MaxTokens: 3, StopStrings: []string{"<|END|>"}})
	if text != "ab<|EN" {
		t.Errorf("got %q, want %q", text, "ab<|EN")
	}
}

func TestReplyCancel(t *testing.T) {
	r := scriptedReplier(t, []string{"one", " two", " three"}, noEnd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []string
	text, st, err := r.Reply(ctx, nil, hi, ReplyOptions{}, func(s string) {
		seen = append(seen, s)
		if len(seen) == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || text != "one two" || st.StopReason != StopCancelled {
		t.Errorf("got %q (%s, %v), want %q, cancelled", text, st.StopReason, err, "one two")
	}
	text, _, err = r.Reply(ctx, nil, hi, ReplyOptions{}, nil)
	if !errors.Is(err, context.Canceled) || text != "" {
		t.Errorf("a cancelled context: got %q, %v", text, err)
	}
}

// IgnoreStops goes on through the stop token (left out of the text as special)
// and stop strings, as the demo's look past the end of text does.
func TestReplyIgnoreStops(t *testing.T) {
	r := scriptedReplier(t, []string{"Hel", "lo"}, imEnd)
	text, st, err := reply(t, r, context.Background(), ReplyOptions{MaxTokens: 5, IgnoreStops: true, StopStrings: []string{"lo"}})
	if err != nil || text != "HelloHello" || st.GeneratedTokens != 5 {
		t.Errorf("got %q (%d tokens, %v), want %q", text, st.GeneratedTokens, err, "HelloHello")
	}
}

// ReplyText continues a prompt without the template; a session carries over turns.
func TestReplyTextAndSessions(t *testing.T) {
	r := scriptedReplier(t, []string{"Hel", "lo"}, imEnd)
	text, _, err := r.ReplyText(context.Background(), nil, "say it\n", ReplyOptions{AddSpecialTokens: true}, nil)
	if err != nil || text != "Hello" {
		t.Errorf("ReplyText: %q, %v", text, err)
	}
	sess := NewSession(r.Model)
	msgs := slices.Clone(hi)
	for turn := 0; turn < 2; turn++ {
		text, st, err := r.Reply(context.Background(), sess, msgs, ReplyOptions{}, nil)
		if err != nil || text != "Hello" {
			t.Fatalf("turn %d: %q, %v", turn, text, err)
		}
		if turn == 1 && st.ReusedTokens == 0 {
			t.Error("the second turn reused nothing of the first")
		}
		if !strings.Contains(st.String(), StopToken) {
			t.Errorf("summary %q lacks the stop reason", st.String())
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: text}, chat.Message{Role: "user", Content: "again"})
	}
	noTemplate := NewReplier(r.Model, r.Tokenizer, nil)
	if _, _, err := noTemplate.Reply(context.Background(), nil, hi, ReplyOptions{}, nil); err == nil {
		t.Error("Reply without a chat template did not fail")
	}
}
