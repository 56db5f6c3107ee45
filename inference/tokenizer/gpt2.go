package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// FromGPT2 builds a tokenizer from OpenAI's GPT-2 files: encoder.json (token
// to id) and vocab.bpe (merges, one "a b" per line after a version line). The
// result is what Hugging Face's tokenizer.json for GPT-2 describes: byte-level
// BPE with the GPT-2 split and <|endoftext|> as a special token.
func FromGPT2(encoderJSON, vocabBPE []byte) (*Tokenizer, error) {
	if len(encoderJSON)+len(vocabBPE) > MaxTokenizerJSON {
		return nil, fmt.Errorf("%w: GPT-2 files are %d bytes, cap %d", ErrTooLarge, len(encoderJSON)+len(vocabBPE), MaxTokenizerJSON)
	}
	m := modelJSON{Type: "BPE"}
	if err := json.Unmarshal(encoderJSON, &m.Vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: encoder.json: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(vocabBPE))
	sc.Buffer(nil, 1<<20)
	for line := 0; sc.Scan(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(text, "#version") || text == "" {
			continue
		}
		a, b, ok := cutSpace(text)
		if !ok {
			return nil, fmt.Errorf("tokenizer: vocab.bpe line %d: want \"a b\", got %q", line+1, text)
		}
		m.Merges = append(m.Merges, mergeJSON{a, b})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer: vocab.bpe: %w", err)
	}
	byteLevel := json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`)
	f := fileJSON{PreTokenizer: byteLevel, Decoder: byteLevel, PostProcessor: byteLevel}
	if id, ok := m.Vocab["<|endoftext|>"]; ok {
		f.AddedTokens = []addedTokenJSON{{ID: id, Content: "<|endoftext|>", Special: true}}
	}
	t, err := build(&f, &m)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t.setSpecialIDs(nil)
	return t, nil
}
