package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/inloop/inloop/internal/capped"
)

// Size caps for the files read from a model folder; model folders are
// untrusted input.
const (
	maxTokenizerConfigBytes = 32 << 20 // added_tokens_decoder can be large
	maxTemplateBytes        = 1 << 20  // the longest real templates are ~30 KB
	maxSmallConfigBytes     = 4 << 20  // config.json, generation_config.json
	maxExtraTemplates       = 64
)

// LoadTemplate reads the chat template and special tokens of the Hugging Face
// model folder dir:
//
//   - chat_template.jinja (the newer layout) or else tokenizer_config.json's
//     chat_template, which is a string or a list of {name, template}; the
//     one named "default" is returned and the others are reached with Named;
//   - additional_chat_templates/NAME.jinja, more named templates;
//   - bos_token, eos_token, pad_token, unk_token (strings or {content}
//     objects) and added_tokens_decoder from tokenizer_config.json;
//   - eos_token_id (a number or a list) from generation_config.json and
//     config.json, for EOSTokens and StopStrings.
//
// A model without any template gets the ChatML fallback (Fallback reports
// true). A template that does not parse is an *Error naming it.
func LoadTemplate(dir string) (*Template, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("chat: %s is not a model folder", dir)
	}

	m := &model{templates: map[string]*Template{}, broken: map[string]error{}, idToken: map[int]string{}}
	sources := map[string]string{} // template name -> source
	files := map[string]string{}   // template name -> file it came from

	tcPath := filepath.Join(dir, "tokenizer_config.json")
	tc, err := capped.ReadFile(tcPath, maxTokenizerConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("chat: %w", err)
	default:
		if err := parseTokenizerConfig(tc, m, sources); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", tcPath, err)
		}
		for name := range sources {
			files[name] = tcPath
		}
	}

	// transformers saves templates as files now, and a file wins over the
	// copy in tokenizer_config.json.
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if src, err := capped.ReadFile(jinjaPath, maxTemplateBytes); err == nil {
		sources["default"], files["default"] = string(src), jinjaPath
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	} else if len(sources) == 0 {
		// Processor folders keep {"chat_template": "..."} in chat_template.json.
		ctPath := filepath.Join(dir, "chat_template.json")
		if data, err := capped.ReadFile(ctPath, maxTemplateBytes); err == nil {
			var ct struct {
				ChatTemplate string `json:"chat_template"`
			}
			if err := json.Unmarshal(data, &ct); err != nil {
				return nil, fmt.Errorf("chat: %s: %w", ctPath, err)
			}
			if ct.ChatTemplate != "" {
				sources["default"], files["default"] = ct.ChatTemplate, ctPath
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("chat: %w", err)
		}
	}
	if err := readExtraTemplates(filepath.Join(dir, "additional_chat_templates"), sources, files); err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}

	for _, name := range []string{"generation_config.json", "config.json"} {
		p := filepath.Join(dir, name)
		data, err := capped.ReadFile(p, maxSmallConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("chat: %w", err)
		}
		ids, err := parseEOSIDs(data)
		if err != nil {
			return nil, fmt.Errorf("chat: %s: %w", p, err)
		}
		m.addEOS(ids...)
	}
	for id, s := range m.idToken {
		if s == m.tokens.EOS && m.tokens.EOS != "" && !slices.Contains(m.tokens.EOSIDs, id) {
			m.addEOS(id)
		}
	}

	if len(sources) == 0 {
		fb := ChatML(m.tokens)
		fb.model.idToken = m.idToken
		return fb, nil
	}
	if _, ok := sources["default"]; !ok {
		if len(sources) != 1 {
			names := make([]string, 0, len(sources))
			for n := range sources {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("chat: %s: the model has several chat templates %q and none named \"default\"", dir, names)
		}
		for n, src := range sources {
			delete(sources, n)
			sources["default"], files["default"] = src, files[n]
		}
	}
	for name, src := range sources {
		t, err := m.compile(name, files[name], src)
		if err != nil {
			m.broken[name] = err
			continue
		}
		m.templates[name] = t
	}
	if err, ok := m.broken["default"]; ok {
		return nil, err
	}
	return m.templates["default"], nil
}

func (m *model) addEOS(ids ...int) {
	for _, id := range ids {
		if !slices.Contains(m.tokens.EOSIDs, id) {
			m.tokens.EOSIDs = append(m.tokens.EOSIDs, id)
		}
	}
}

// parseTokenizerConfig takes the template(s) and special tokens out of
// tokenizer_config.json.
func parseTokenizerConfig(data []byte, m *model, sources map[string]string) error {
	var tc struct {
		ChatTemplate json.RawMessage            `json:"chat_template"`
		BOS          json.RawMessage            `json:"bos_token"`
		EOS          json.RawMessage            `json:"eos_token"`
		PAD          json.RawMessage            `json:"pad_token"`
		UNK          json.RawMessage            `json:"unk_token"`
		Added        map[string]json.RawMessage `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(data, &tc); err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
		dst *string
	}{{"bos_token", tc.BOS, &m.tokens.BOS}, {"eos_token", tc.EOS, &m.tokens.EOS}, {"pad_token", tc.PAD, &m.tokens.PAD}, {"unk_token", tc.UNK, &m.tokens.UNK}} {
		s, err := tokenString(f.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
		*f.dst = s
	}
	for k, raw := range tc.Added {
		id, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("added_tokens_decoder: id %q is not a number", k)
		}
		s, err := tokenString(raw)
		if err != nil {
			return fmt.Errorf("added_tokens_decoder %d: %w", id, err)
		}
		m.idToken[id] = s
	}

	raw := bytes.TrimSpace(tc.ChatTemplate)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("chat_template: %w", err)
		}
		if len(s) > maxTemplateBytes {
			return fmt.Errorf("chat_template: %d bytes, more than the %d allowed", len(s), maxTemplateBytes)
		}
		sources["default"] = s
	case raw[0] == '[':
		var list []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("chat_template: %w", err)
		}
		if len(list) > maxExtraTemplates {
			return fmt.Errorf("chat_template: %d templates, more than the %d allowed", len(list), maxExtraTemplates)
		}
		for i, e := range list {
			if e.Name == "" {
				return fmt.Errorf("chat_template[%d]: no name", i)
			}
			if len(e.Template) > maxTemplateBytes {
				return fmt.Errorf("chat_template %q: %d bytes, more than the %d allowed", e.Name, len(e.Template), maxTemplateBytes)
			}
			sources[e.Name] = e.Template
		}
	default:
		return errors.New("chat_template: neither a string nor a list of {name, template}")
	}
	return nil
}

// tokenString reads a special token written as a string, as an AddedToken
// object {"content": ...}, or as null.
func tokenString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("neither a string nor an object with content")
	}
	return *obj.Content, nil
}

// parseEOSIDs reads eos_token_id, a number or a list of numbers, from a
// config file. An absent or null field is no ids.
func parseEOSIDs(data []byte) ([]int, error) {
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(cfg.EOS)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("eos_token_id: neither an integer nor a list of integers")
	}
	if len(many) > 1024 {
		return nil, fmt.Errorf("eos_token_id: %d ids", len(many))
	}
	return many, nil
}

// readExtraTemplates reads additional_chat_templates/NAME.jinja.
func readExtraTemplates(dir string, sources, files map[string]string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || name == "" || !e.Type().IsRegular() {
			continue
		}
		if n++; n > maxExtraTemplates {
			return fmt.Errorf("%s: more than %d templates", dir, maxExtraTemplates)
		}
		p := filepath.Join(dir, e.Name())
		src, err := capped.ReadFile(p, maxTemplateBytes)
		if err != nil {
			return err
		}
		sources[name], files[name] = string(src), p
	}
	return nil
}
