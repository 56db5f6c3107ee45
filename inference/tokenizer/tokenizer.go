// Package tokenizer turns text into token ids and back for the models Inloop
// runs, reading Hugging Face's tokenizer.json: byte-level BPE (GPT-2, Llama 3,
// Qwen) and sentencepiece-style BPE with byte fallback (Llama 2, Mistral), with
// the normalizers, pre-tokenizers, post-processors and decoders those files
// use, added and special tokens, and a streaming decoder that only ever emits
// complete UTF-8.
//
// It is written from the file format's behaviour, tested against the ids of
// independent implementations on real vocabularies (see testdata/), and reads
// tokenizer files as untrusted input: sizes are capped and unknown component
// types are errors that name the type.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	model      *bpeModel
	normalizer normalizer
	preTok     preTokenizer
	post       *postProcessor
	decoder    decoder

	rawTrie     *tokenTrie // added tokens matched in the raw text
	normTrie    *tokenTrie // added tokens matched in the normalized text
	tokens      []string   // by id
	present     []bool     // by id: some token has the id
	special     []bool     // by id
	addedByText map[string]*addedToken

	bos    int // -1 if none
	eos    []int
	addBOS bool // prepend bos when encoding with special tokens (tokenizer_config.json)
	addEOS bool
}

// Size caps on files read from model folders.
const (
	MaxTokenizerJSON = 64 << 20
	maxConfigJSON    = 16 << 20
)

// ErrTooLarge is returned for a tokenizer file over its size cap.
var ErrTooLarge = errors.New("tokenizer: file too large")

// FromJSON builds a tokenizer from the contents of a tokenizer.json.
func FromJSON(data []byte) (*Tokenizer, error) {
	return FromJSONWithConfig(data, nil)
}

// FromJSONWithConfig builds a tokenizer from tokenizer.json and, if not nil,
// tokenizer_config.json (bos_token, eos_token, add_bos_token, add_eos_token).
func FromJSONWithConfig(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	if len(tokenizerJSON) > MaxTokenizerJSON {
		return nil, fmt.Errorf("%w: tokenizer.json is %d bytes, cap %d", ErrTooLarge, len(tokenizerJSON), MaxTokenizerJSON)
	}
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	t, err := build(&f, nil)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfg *tokenizerConfig
	if len(configJSON) > maxConfigJSON {
		return nil, fmt.Errorf("%w: tokenizer_config.json is %d bytes, cap %d", ErrTooLarge, len(configJSON), maxConfigJSON)
	}
	if configJSON != nil {
		if cfg, err = parseTokenizerConfig(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
	}
	t.setSpecialIDs(cfg)
	return t, nil
}

// build assembles a tokenizer from the parsed file; m, if not nil, is the
// model already decoded.
func build(f *fileJSON, m *modelJSON) (*Tokenizer, error) {
	if m == nil {
		if isNull(f.Model) {
			return nil, errors.New("model: missing")
		}
		// The type first, so that another model kind is reported by name.
		var head struct {
			Type   string          `json:"type"`
			Merges json.RawMessage `json:"merges"`
		}
		if err := json.Unmarshal(f.Model, &head); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		if head.Type == "" && head.Merges != nil {
			head.Type = "BPE" // files from before the type field
		}
		if head.Type != "BPE" {
			return nil, fmt.Errorf("model: unsupported type %q (only BPE is implemented)", head.Type)
		}
		m = new(modelJSON)
		if err := json.Unmarshal(f.Model, m); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	model, err := newBPE(m)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{model: model, rawTrie: newTokenTrie(), normTrie: newTokenTrie(), addedByText: map[string]*addedToken{}}
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.preTok, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}

	size := 0
	for _, id := range model.vocab {
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.ID >= maxVocab {
			return nil, fmt.Errorf("added token %q has id %d, want 0..%d", a.Content, a.ID, maxVocab-1)
		}
		size = max(size, a.ID+1)
	}
	// Ids index slices, so a few large ids in a small file must not make
	// huge ones: vocabularies are dense, allow a little slack.
	if count := len(model.vocab) + len(f.AddedTokens); size > 2*count+1024 {
		return nil, fmt.Errorf("vocabulary: ids up to %d for %d tokens; want ids close to 0..%d", size-1, count, count-1)
	}
	t.tokens = make([]string, size)
	t.present = make([]bool, size)
	t.special = make([]bool, size)
	for tok, id := range model.vocab {
		t.tokens[id], t.present[id] = tok, true
	}
	for _, a := range f.AddedTokens {
		tok := &addedToken{id: a.ID, content: a.Content, special: a.Special, lstrip: a.LStrip,
			rstrip: a.RStrip, singleWord: a.SingleWord, normalized: a.Normalized}
		t.tokens[a.ID], t.present[a.ID] = a.Content, true
		t.special[a.ID] = a.Special
		if _, dup := t.addedByText[a.Content]; !dup {
			t.addedByText[a.Content] = tok
		}
		if !tok.normalized {
			t.rawTrie.add(tok.content, tok)
			continue
		}
		content := tok.content
		if t.normalizer != nil {
			if content, err = t.normalizer.normalize(content); err != nil {
				return nil, fmt.Errorf("added token %q: %w", a.Content, err)
			}
		}
		t.normTrie.add(content, tok)
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, t.TokenID); err != nil {
		return nil, err
	}
	if t.post != nil {
		for _, id := range slices.Concat(t.post.prefix, t.post.suffix) {
			if _, ok := t.Token(id); !ok {
				return nil, fmt.Errorf("post_processor: token id %d is not in the vocabulary", id)
			}
		}
	}
	return t, nil
}

// Encode returns the token ids of text. With addSpecial, the model's special
// tokens are added as its post-processor (or tokenizer_config.json's
// add_bos_token) says, BOS for Llama-style models. Special tokens written in
// the text (such as <|im_start|>) are always recognised. Invalid UTF-8 in text
// is read as U+FFFD.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	ids := make([]int, 0, len(text)/3+4)
	toModel := func(w word) { ids = t.model.encodeWord(ids, w) }
	for _, sec := range t.rawTrie.split(nil, text) {
		if sec.tok != nil {
			ids = append(ids, sec.tok.id)
			continue
		}
		normalized := sec.text
		if t.normalizer != nil {
			var err error
			if normalized, err = t.normalizer.normalize(sec.text); err != nil {
				return nil, fmt.Errorf("tokenizer: normalize: %w", err)
			}
		}
		for i, sub := range t.normTrie.split(nil, normalized) {
			if sub.tok != nil {
				ids = append(ids, sub.tok.id)
				continue
			}
			w := word{text: sub.text, first: sec.start == 0 && i == 0}
			if t.preTok == nil {
				toModel(w)
				continue
			}
			if err := t.preTok.preTokenize(w, toModel); err != nil {
				return nil, fmt.Errorf("tokenizer: pre-tokenize: %w", err)
			}
		}
	}
	if addSpecial {
		ids = t.post.apply(ids)
		if t.addBOS && t.bos >= 0 && (len(ids) == 0 || ids[0] != t.bos) {
			ids = append([]int{t.bos}, ids...)
		}
		if t.addEOS && len(t.eos) > 0 && (len(ids) == 0 || ids[len(ids)-1] != t.eos[0]) {
			ids = append(ids, t.eos[0])
		}
	}
	return ids, nil
}

// Decode returns the text of ids. With skipSpecial, special tokens are left
// out. Unknown ids are skipped; bytes that do not form UTF-8 become U+FFFD.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	return lossyUTF8(t.decodeRaw(ids, skipSpecial))
}

// decodeRaw runs the decoder chain, returning bytes that may end inside a
// UTF-8 sequence.
func (t *Tokenizer) decodeRaw(ids []int, skipSpecial bool) []byte {
	pieces := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) || !t.present[id] {
			continue
		}
		if skipSpecial && t.special[id] {
			continue
		}
		pieces = append(pieces, t.tokens[id])
	}
	if t.decoder == nil {
		return []byte(strings.Join(pieces, " "))
	}
	var b bytes.Buffer
	for _, p := range t.decoder.decode(pieces) {
		b.WriteString(p)
	}
	return b.Bytes()
}

// VocabSize returns the number of token ids, added tokens included: one more
// than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token (in the vocabulary's own alphabet, such
// as "Ġthe" for byte-level models).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if a, ok := t.addedByText[s]; ok {
		return a.id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the token string of id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.present[id] {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial reports whether id is a special token (left out by Decode with
// skipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// BOS returns the beginning-of-sequence token, if the model has one.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// EOS returns the tokens that end generation, most important first.
func (t *Tokenizer) EOS() []int { return append([]int(nil), t.eos...) }
