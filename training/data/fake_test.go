package data

import (
	"errors"
	"strings"
	"sync/atomic"
)

// Test tokens: one per byte, and two specials above the byte range, so every
// expected token list can be written from the text by hand.
const (
	testBOS = 256
	testEOS = 257
)

// byteTokenizer encodes each byte as its value; addSpecial puts BOS first.
// It counts its calls so tests can see what was (not) re-tokenized.
type byteTokenizer struct{ calls atomic.Int64 }

func (t *byteTokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	t.calls.Add(1)
	if strings.Contains(text, "\x7f") {
		return nil, errors.New("DEL is not in the vocabulary")
	}
	ids := make([]int, 0, len(text)+1)
	if addSpecial {
		ids = append(ids, testBOS)
	}
	for i := 0; i < len(text); i++ {
		ids = append(ids, int(text[i]))
	}
	return ids, nil
}

// offsetTokenizer is byteTokenizer with the OffsetTokenizer ability.
type offsetTokenizer struct{ byteTokenizer }

func (t *offsetTokenizer) EncodeOffsets(text string) ([]int, []int, error) {
	ids, err := t.Encode(text, false)
	starts := make([]int, len(ids))
	for i := range starts {
		starts[i] = i
	}
	return ids, starts, err
}

// decode turns test tokens back into text, specials as <s> and </s>.
func decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		switch id {
		case testBOS:
			b.WriteString("<s>")
		case testEOS:
			b.WriteString("</s>")
		default:
			b.WriteByte(byte(id))
		}
	}
	return b.String()
}

// learned is the text of an example's masked-in tokens.
func learned(e Example) string {
	var ids []int32
	for i, m := range e.Mask {
		if m {
			ids = append(ids, e.Tokens[i])
		}
	}
	return decode(ids)
}

// tagTemplate is a chat template: "<role>content</s>\n" per turn, and
// "<assistant>" as the generation prompt.
type tagTemplate struct{}

func (tagTemplate) Render(msgs []Message, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<" + m.Role + ">" + m.Content + "</s>\n")
	}
	if gen {
		b.WriteString("<assistant>")
	}
	return b.String(), nil
}

// thinkTemplate opens the generation prompt with an empty reasoning block
// that the rendered conversation does not have, as some reasoning models'
// templates do: the prompt is then not a prefix of the conversation.
type thinkTemplate struct{}

func (thinkTemplate) Render(msgs []Message, gen bool) (string, error) {
	s, _ := tagTemplate{}.Render(msgs, gen)
	if gen {
		s += "<think></think>"
	}
	return s, nil
}
