package data

import (
	"errors"
	"fmt"
	"math"
)

// Tokenizer turns text into token ids. addSpecial asks for the tokens the model
// expects around plain text (a BOS, for most models); chat renderings already
// spell theirs out, so they are encoded with addSpecial false.
type Tokenizer interface {
	Encode(text string, addSpecial bool) ([]int, error)
}

// OffsetTokenizer is an optional ability of a Tokenizer: it encodes text
// (without special tokens) and reports the byte offset where each token starts.
// With it a document is tokenized in one piece and chunk breaks are placed by
// offset, which is exact for every tokenizer. Without it a document is encoded
// sentence by sentence, which is exact for byte-level BPE (GPT-2, Llama 3, Qwen,
// SmolLM) but adds a word marker per sentence with tokenizers that prepend one
// to every input (SentencePiece's add_dummy_prefix).
type OffsetTokenizer interface {
	EncodeOffsets(text string) (ids []int, starts []int, err error)
}

// Renderer applies a model's chat template. addGenerationPrompt appends the
// header that opens the assistant's turn.
type Renderer interface {
	Render(msgs []Message, addGenerationPrompt bool) (string, error)
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Example is one training sequence.
type Example struct {
	Tokens []int32
	// Mask[i] says whether token i is learned: the loss counts the prediction
	// of token i from the tokens before it. Same length as Tokens.
	Mask []bool
	// Source names where the example came from: "file:line" or a chunk ID.
	Source string
}

// Targets counts the tokens the example teaches (the first token is never
// predicted).
func (e Example) Targets() int {
	n := 0
	for i := 1; i < len(e.Mask); i++ {
		if e.Mask[i] {
			n++
		}
	}
	return n
}

// Format is the shape of a JSONL file's rows.
type Format uint8

const (
	FormatUnknown    Format = iota
	FormatText              // {"text": ...}
	FormatCompletion        // {"prompt": ..., "completion": ...}
	FormatChat              // {"messages": [{"role": ..., "content": ...}, ...]}
)

func (f Format) String() string {
	switch f {
	case FormatText:
		return "text"
	case FormatCompletion:
		return "prompt/completion"
	case FormatChat:
		return "chat"
	}
	return "unknown"
}

var (
	// ErrNoExamples: nothing usable was found; the report says why.
	ErrNoExamples = errors.New("data: no usable examples")
	// ErrTooLarge: a file is over its size cap.
	ErrTooLarge = errors.New("data: file too large")
	// ErrBinary: a document looks like a binary file (it holds NUL bytes).
	ErrBinary = errors.New("data: binary file")
	// ErrJSONArray: a .jsonl file holds one JSON array ([{...}, {...}]), not
	// JSON Lines (one object per line). It comes with ErrNoExamples.
	ErrJSONArray = errors.New("the file is one JSON array, not JSON Lines (one object per line)")
)

// toInt32 checks ids from a tokenizer before they are stored compactly.
func toInt32(ids []int) ([]int32, error) {
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer returned id %d", id)
		}
		out[i] = int32(id)
	}
	return out, nil
}
