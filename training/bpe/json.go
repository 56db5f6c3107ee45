package bpe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/inloop/inloop/internal/atomicfile"
)

// ChatMLTemplate is a ChatML chat template (<|im_start|>role\n…<|im_end|>\n)
// for tokenizer_config.json, for a tokenizer whose special tokens include
// "<|im_start|>" and "<|im_end|>".
const ChatMLTemplate = "{% for message in messages %}" +
	"{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// object is a JSON object that keeps its keys in order.
type object []field

type field struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := marshal(f.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping, so that "<|im_end|>" stays
// readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// indent formats v with two-space indentation and a final newline.
func indent(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("bpe: encoding JSON: %v", err)) // only strings, numbers and bools
	}
	return b.Bytes()
}

func (r *Result) numModel() int { return len(r.Vocab) - r.NumSpecial }

func (r *Result) addedTokens() []any {
	var added []any
	for id := r.numModel(); id < len(r.Vocab); id++ {
		added = append(added, object{
			{"id", id}, {"content", r.Vocab[id]}, {"single_word", false}, {"lstrip", false},
			{"rstrip", false}, {"normalized", false}, {"special", true},
		})
	}
	return added
}

// JSON returns the tokenizer as Hugging Face's tokenizer.json: a BPE model
// with ByteLevel pre-tokenizer (GPT-2 split, no prefix space), post-processor
// and decoder, no normalizer, and the special tokens as added tokens (which
// are not in the model's vocabulary).
func (r *Result) JSON() []byte {
	vocab := make(object, r.numModel())
	for id := range vocab {
		vocab[id] = field{r.Vocab[id], id}
	}
	merges := make([]string, len(r.Merges))
	for i, m := range r.Merges {
		merges[i] = m[0] + " " + m[1] // byte-level tokens hold no spaces
	}
	added := r.addedTokens()
	if added == nil {
		added = []any{}
	}
	byteLevel := func(prefix, trim, regex bool) object {
		return object{{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", trim}, {"use_regex", regex}}
	}
	return indent(object{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", nil},
		{"pre_tokenizer", byteLevel(false, true, true)},
		{"post_processor", byteLevel(false, false, false)},
		{"decoder", byteLevel(false, false, false)},
		{"model", object{
			{"type", "BPE"},
			{"dropout", nil},
			{"unk_token", nil},
			{"continuing_subword_prefix", nil},
			{"end_of_word_suffix", nil},
			{"fuse_unk", false},
			{"byte_fallback", false},
			{"ignore_merges", false},
			{"vocab", vocab},
			{"merges", merges},
		}},
	})
}

// TokenizerConfigJSON returns tokenizer_config.json: the special tokens, the
// BOS, EOS and pad tokens of Options (no BOS or EOS is added when encoding),
// and chatTemplate as chat_template when it is not empty (see
// ChatMLTemplate).
func (r *Result) TokenizerConfigJSON(chatTemplate string) []byte {
	decoder := object{}
	for id := r.numModel(); id < len(r.Vocab); id++ {
		decoder = append(decoder, field{strconv.Itoa(id), object{
			{"content", r.Vocab[id]}, {"lstrip", false}, {"normalized", false},
			{"rstrip", false}, {"single_word", false}, {"special", true},
		}})
	}
	name := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var specials []string
	for id := r.numModel(); id < len(r.Vocab); id++ {
		specials = append(specials, r.Vocab[id])
	}
	if specials == nil {
		specials = []string{}
	}
	cfg := object{
		{"add_bos_token", false},
		{"add_eos_token", false},
		{"add_prefix_space", false},
		{"added_tokens_decoder", decoder},
		{"additional_special_tokens", specials},
		{"bos_token", name(r.bos)},
	}
	if chatTemplate != "" {
		cfg = append(cfg, field{"chat_template", chatTemplate})
	}
	cfg = append(cfg,
		field{"clean_up_tokenization_spaces", false},
		field{"eos_token", name(r.eos)},
		field{"errors", "replace"},
	)
	if r.modelMaxLength > 0 {
		cfg = append(cfg, field{"model_max_length", r.modelMaxLength})
	}
	cfg = append(cfg,
		field{"pad_token", name(r.pad)},
		field{"split_special_tokens", false},
		field{"tokenizer_class", "PreTrainedTokenizerFast"},
		field{"unk_token", nil},
	)
	return indent(cfg)
}

// WriteFiles writes tokenizer.json and tokenizer_config.json into dir, each
// replaced atomically (internal/atomicfile).
func (r *Result) WriteFiles(dir, chatTemplate string) error {
	for _, f := range []struct {
		name string
		data []byte
	}{{"tokenizer.json", r.JSON()}, {"tokenizer_config.json", r.TokenizerConfigJSON(chatTemplate)}} {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("bpe: %w", err)
		}
	}
	return nil
}
