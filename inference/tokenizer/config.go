package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/inloop/inloop/internal/capped"
)

// Load reads a model folder's tokenizer.json and, where present,
// tokenizer_config.json (bos/eos tokens, add_bos_token) and
// generation_config.json (eos_token_id, which may list several stop tokens).
// When the folder has a config.json, every id (added tokens included) must
// be below its vocab_size, or Load refuses with ErrVocabMismatch.
func Load(dir string) (*Tokenizer, error) {
	tokJSON, err := readCapped(filepath.Join(dir, "tokenizer.json"), MaxTokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfgJSON, err := readCapped(filepath.Join(dir, "tokenizer_config.json"), maxConfigJSON)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSONWithConfig(tokJSON, cfgJSON)
	if err != nil {
		return nil, err
	}
	if err := t.checkVocabSize(filepath.Join(dir, "config.json")); err != nil {
		return nil, err
	}
	genJSON, err := readCapped(filepath.Join(dir, "generation_config.json"), maxConfigJSON)
	switch {
	case err == nil:
		if err := t.addGenerationEOS(genJSON); err != nil {
			return nil, fmt.Errorf("tokenizer: generation_config.json: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// ErrVocabMismatch is returned by Load for a tokenizer whose ids reach past
// the model's vocab_size: the model has no embedding for them.
var ErrVocabMismatch = errors.New("tokenizer: ids beyond the model's vocabulary")

// checkVocabSize compares the tokenizer's ids, added tokens included, with
// config.json's vocab_size (or text_config's, for models that nest it), where
// the folder has one. Models often have more embedding rows than tokens;
// fewer means an id with no row.
func (t *Tokenizer) checkVocabSize(path string) error {
	raw, err := readCapped(path, maxConfigJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	var cfg struct {
		VocabSize  *int `json:"vocab_size"`
		TextConfig *struct {
			VocabSize *int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("tokenizer: config.json: %w", err)
	}
	size := cfg.VocabSize
	if size == nil && cfg.TextConfig != nil {
		size = cfg.TextConfig.VocabSize
	}
	if size == nil || t.VocabSize() <= *size {
		return nil
	}
	last, _ := t.Token(t.VocabSize() - 1)
	return fmt.Errorf("%w: tokenizer.json has ids up to %d (%d ids, added tokens included), but config.json's vocab_size is %d; the last is %q",
		ErrVocabMismatch, t.VocabSize()-1, t.VocabSize(), *size, last)
}

// readCapped reads a file of at most limit bytes; one over it is an error
// matching both ErrTooLarge and capped.ErrTooLarge, naming the file and sizes.
func readCapped(path string, limit int64) ([]byte, error) {
	data, err := capped.ReadFile(path, limit)
	if errors.Is(err, capped.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return data, err
}

// tokenizerConfig holds what tokenizer_config.json says about special tokens.
type tokenizerConfig struct {
	bos, eos       *string // nil: not given or null
	addBOS, addEOS bool
}

func parseTokenizerConfig(data []byte) (*tokenizerConfig, error) {
	var raw struct {
		BOS    json.RawMessage `json:"bos_token"`
		EOS    json.RawMessage `json:"eos_token"`
		AddBOS *bool           `json:"add_bos_token"`
		AddEOS *bool           `json:"add_eos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	c := &tokenizerConfig{}
	var err error
	if c.bos, err = tokenName(raw.BOS); err != nil {
		return nil, fmt.Errorf("bos_token: %w", err)
	}
	if c.eos, err = tokenName(raw.EOS); err != nil {
		return nil, fmt.Errorf("eos_token: %w", err)
	}
	c.addBOS = raw.AddBOS != nil && *raw.AddBOS
	c.addEOS = raw.AddEOS != nil && *raw.AddEOS
	return c, nil
}

// tokenName reads a token written as "text", as {"content": "text", ...}, or
// as null.
func tokenName(raw json.RawMessage) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return &s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return nil, fmt.Errorf("want a string or {\"content\": ...}, got %s", truncate(raw))
	}
	return obj.Content, nil
}

// commonEOS names end-of-text tokens, tried when no config says which is EOS.
var commonEOS = []string{"</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<end_of_turn>", "<|end|>"}

// setSpecialIDs picks BOS and EOS: from the config when there is one, else BOS
// from the post-processor's template and EOS from well-known token names.
func (t *Tokenizer) setSpecialIDs(cfg *tokenizerConfig) {
	t.bos = -1
	if cfg != nil {
		if cfg.bos != nil {
			if id, ok := t.TokenID(*cfg.bos); ok {
				t.bos = id
			}
		}
		if cfg.eos != nil {
			if id, ok := t.TokenID(*cfg.eos); ok {
				t.eos = append(t.eos, id)
			}
		}
		t.addBOS, t.addEOS = cfg.addBOS, cfg.addEOS
	}
	if t.bos < 0 && t.post != nil && len(t.post.prefix) > 0 && (cfg == nil || cfg.bos == nil) {
		t.bos = t.post.prefix[0]
	}
	if len(t.eos) == 0 {
		for _, name := range commonEOS {
			if a, ok := t.addedByText[name]; ok && a.special {
				t.eos = append(t.eos, a.id)
			}
		}
	}
}

// addGenerationEOS adds generation_config.json's eos_token_id (a number or a
// list) to the stop tokens.
func (t *Tokenizer) addGenerationEOS(data []byte) error {
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return err
	}
	if isNull(g.EOS) {
		return nil
	}
	var ids []int
	var one int
	if err := json.Unmarshal(g.EOS, &one); err == nil {
		ids = []int{one}
	} else if err := json.Unmarshal(g.EOS, &ids); err != nil {
		return fmt.Errorf("eos_token_id: want a number or a list, got %s", truncate(g.EOS))
	}
	for _, id := range ids {
		if _, ok := t.Token(id); ok && !slices.Contains(t.eos, id) {
			t.eos = append(t.eos, id)
		}
	}
	return nil
}
