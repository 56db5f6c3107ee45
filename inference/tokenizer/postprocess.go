package tokenizer

import (
	"encoding/json"
	"fmt"
)

// A postProcessor adds a model's special tokens around one encoded sequence
// (BOS for Llama, <s> ... </s> for RoBERTa). Only single sequences are
// encoded here, so only the "single" template matters.
type postProcessor struct {
	prefix, suffix []int
}

func (p *postProcessor) apply(ids []int) []int {
	if p == nil || len(p.prefix)+len(p.suffix) == 0 {
		return ids
	}
	out := make([]int, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}

// parsePostProcessor resolves token names with lookup.
func parsePostProcessor(raw json.RawMessage, lookup func(string) (int, bool)) (*postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType("post_processor", raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return &postProcessor{}, nil
	case "TemplateProcessing":
		var c struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := decodeFields("post_processor", typ, raw, &c); err != nil {
			return nil, err
		}
		p := &postProcessor{}
		seen := false
		for _, item := range c.Single {
			switch {
			case item.Sequence != nil:
				if seen {
					return nil, fmt.Errorf("post_processor TemplateProcessing: the single template has two sequences")
				}
				seen = true
			case item.SpecialToken != nil:
				ids := c.SpecialTokens[item.SpecialToken.ID].IDs
				if len(ids) == 0 {
					id, ok := lookup(item.SpecialToken.ID)
					if !ok {
						return nil, fmt.Errorf("post_processor TemplateProcessing: unknown special token %q", item.SpecialToken.ID)
					}
					ids = []int{id}
				}
				if seen {
					p.suffix = append(p.suffix, ids...)
				} else {
					p.prefix = append(p.prefix, ids...)
				}
			}
		}
		if !seen {
			return nil, fmt.Errorf("post_processor TemplateProcessing: the single template has no sequence")
		}
		return p, nil
	case "RobertaProcessing", "BertProcessing":
		var c struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := decodeFields("post_processor", typ, raw, &c); err != nil {
			return nil, err
		}
		var sep, cls int
		if err := json.Unmarshal(c.Sep[1], &sep); err != nil {
			return nil, fmt.Errorf("post_processor %q: sep: %w", typ, err)
		}
		if err := json.Unmarshal(c.Cls[1], &cls); err != nil {
			return nil, fmt.Errorf("post_processor %q: cls: %w", typ, err)
		}
		return &postProcessor{prefix: []int{cls}, suffix: []int{sep}}, nil
	case "Sequence":
		var c struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := decodeFields("post_processor", typ, raw, &c); err != nil {
			return nil, err
		}
		p := &postProcessor{}
		for _, r := range c.Processors {
			q, err := parsePostProcessor(r, lookup)
			if err != nil {
				return nil, err
			}
			if q != nil {
				p.prefix = append(append([]int(nil), q.prefix...), p.prefix...)
				p.suffix = append(p.suffix, q.suffix...)
			}
		}
		return p, nil
	}
	return nil, fmt.Errorf("post_processor: unsupported type %q", typ)
}
