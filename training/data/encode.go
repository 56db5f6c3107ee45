package data

import (
	"errors"
	"fmt"
	"strings"
)

// Encode tokenizes a record and marks what is learned: everything for text,
// the completion for prompt/completion, the last assistant turn for chat. A
// non-empty warning means the example is usable but its mask was found the
// fallback way (see encodeChat).
func Encode(rec Record, opt Options) (ex Example, warning string, err error) {
	if opt.Tokenizer == nil {
		return Example{}, "", errors.New("data: Options.Tokenizer is nil")
	}
	switch rec.Format {
	case FormatText:
		return encodeText(rec.Text, opt)
	case FormatCompletion:
		if opt.Renderer != nil {
			return encodeChat([]Message{{Role: "user", Content: rec.Prompt}, {Role: "assistant", Content: rec.Completion}}, opt)
		}
		return encodePlain(rec.Prompt, rec.Completion, opt)
	case FormatChat:
		if opt.Renderer == nil {
			return Example{}, "", errors.New("chat rows need the model's chat template, and none was given")
		}
		return encodeChat(rec.Messages, opt)
	}
	return Example{}, "", fmt.Errorf("unknown format %d", rec.Format)
}

func encodeText(text string, opt Options) (Example, string, error) {
	ids, err := opt.Tokenizer.Encode(text, true)
	if err != nil {
		return Example{}, "", fmt.Errorf("tokenize: %w", err)
	}
	ids = withEOS(ids, opt)
	return masked(ids, 0)
}

// encodePlain joins prompt and completion as one text, so the tokens are what
// the model sees when it continues the prompt; the learned part starts at the
// first token that differs from the prompt's own tokenization, which is the
// completion's first token unless the tokenizer merged across the seam.
func encodePlain(prompt, completion string, opt Options) (Example, string, error) {
	full, err := opt.Tokenizer.Encode(prompt+completion, true)
	if err != nil {
		return Example{}, "", fmt.Errorf("tokenize: %w", err)
	}
	pre, err := opt.Tokenizer.Encode(prompt, true)
	if err != nil {
		return Example{}, "", fmt.Errorf("tokenize prompt: %w", err)
	}
	cut := commonPrefix(full, pre)
	if cut == len(full) {
		return Example{}, "", errors.New("the completion adds no tokens")
	}
	return masked(withEOS(full, opt), cut)
}

// encodeChat renders the whole conversation, and the conversation up to the
// last assistant turn with the generation prompt; the second should be a
// prefix of the first, and the learned part is what follows it. Templates
// that render earlier turns differently once a reply follows (some drop
// reasoning blocks, some stamp dates) break that; then the mask starts at the
// first token where the two renderings differ, and the row carries a warning.
func encodeChat(msgs []Message, opt Options) (Example, string, error) {
	full, err := opt.Renderer.Render(msgs, false)
	if err != nil {
		return Example{}, "", fmt.Errorf("chat template: %w", err)
	}
	prompt, err := opt.Renderer.Render(msgs[:len(msgs)-1], true)
	if err != nil {
		return Example{}, "", fmt.Errorf("chat template (prompt): %w", err)
	}
	ids, err := opt.Tokenizer.Encode(full, false)
	if err != nil {
		return Example{}, "", fmt.Errorf("tokenize: %w", err)
	}
	pre, err := opt.Tokenizer.Encode(prompt, false)
	if err != nil {
		return Example{}, "", fmt.Errorf("tokenize prompt: %w", err)
	}
	cut := commonPrefix(ids, pre)
	if cut == len(ids) {
		return Example{}, "", errors.New("the last assistant turn adds no tokens")
	}
	var warning string
	if !strings.HasPrefix(full, prompt) {
		warning = fmt.Sprintf("chat template renders the prompt differently from the conversation; learning from the first differing token (%d of %d)", cut, len(ids))
	}
	ex, _, err := masked(ids, cut)
	return ex, warning, err
}

func withEOS(ids []int, opt Options) []int {
	if opt.AppendEOS && (len(ids) == 0 || ids[len(ids)-1] != opt.EOS) {
		ids = append(ids, opt.EOS)
	}
	return ids
}

// masked makes an example learning tokens from index from onward.
func masked(ids []int, from int) (Example, string, error) {
	toks, err := toInt32(ids)
	if err != nil {
		return Example{}, "", err
	}
	mask := make([]bool, len(toks))
	for i := from; i < len(mask); i++ {
		mask[i] = true
	}
	return Example{Tokens: toks, Mask: mask}, "", nil
}

func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
