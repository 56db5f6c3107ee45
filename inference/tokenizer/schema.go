package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The shape of Hugging Face's tokenizer.json, as far as BPE models use it.
// Components are decoded in two steps: their "type" first, then the fields of
// that type, so an unknown type is reported by name.

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	Model         json.RawMessage  `json:"model"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string         `json:"type"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  []mergeJSON    `json:"merges"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Dropout                 *float64       `json:"dropout"`
}

// mergeJSON is one merge rule, written either as "a b" (tokenizers < 0.20) or
// as ["a", "b"], which allows spaces inside tokens.
type mergeJSON [2]string

func (m *mergeJSON) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		a, b, ok := cutSpace(s)
		if !ok {
			return fmt.Errorf("merge %q: want two tokens separated by one space", s)
		}
		m[0], m[1] = a, b
		return nil
	}
	var pair []string
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("merge %s: want \"a b\" or [\"a\", \"b\"]", truncate(data))
	}
	if len(pair) != 2 {
		return fmt.Errorf("merge %s: want two tokens, got %d", truncate(data), len(pair))
	}
	m[0], m[1] = pair[0], pair[1]
	return nil
}

// cutSpace splits "a b" at its space; there must be exactly one.
func cutSpace(s string) (string, string, bool) {
	a, b, ok := strings.Cut(s, " ")
	return a, b, ok && !strings.Contains(b, " ")
}

// patternJSON is {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type componentJSON struct {
	Type string `json:"type"`
}

// isNull reports whether a component is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// componentType decodes the "type" field of a component.
func componentType(kind string, raw json.RawMessage) (string, error) {
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("%s: %w", kind, err)
	}
	if c.Type == "" {
		return "", fmt.Errorf("%s: missing \"type\" in %s", kind, truncate(raw))
	}
	return c.Type, nil
}

// decodeFields decodes raw into v, wrapping errors with the component's name.
func decodeFields(kind, typ string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s %q: %w", kind, typ, err)
	}
	return nil
}

func truncate(b []byte) string {
	const max = 80
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
