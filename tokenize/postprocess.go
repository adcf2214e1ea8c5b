package tokenize

import (
	"encoding/json"
	"fmt"
)

// PostProcessor adds the special tokens of a single sequence (BOS, CLS/SEP, ...). It runs
// only when the caller asks for special tokens.
type PostProcessor interface {
	Process(dst, ids []uint32) []uint32
}

func newPostProcessor(raw json.RawMessage) (PostProcessor, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil // it only trims offsets
	case "TemplateProcessing":
		return newTemplateProcessor(raw)
	case "BertProcessing", "RobertaProcessing":
		var s struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", c.Type, err)
		}
		var sep, cls uint32
		if err := json.Unmarshal(s.Sep[1], &sep); err != nil {
			return nil, fmt.Errorf("post_processor %s sep: %w", c.Type, err)
		}
		if err := json.Unmarshal(s.Cls[1], &cls); err != nil {
			return nil, fmt.Errorf("post_processor %s cls: %w", c.Type, err)
		}
		return templateProcessor{pre: []uint32{cls}, post: []uint32{sep}}, nil
	case "Sequence":
		var s struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("post_processor Sequence: %w", err)
		}
		var seq sequenceProcessor
		for _, r := range s.Processors {
			p, err := newPostProcessor(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	default:
		return nil, fmt.Errorf("post_processor type %q is not supported", c.Type)
	}
}

// templateProcessor surrounds the sequence with fixed ids.
type templateProcessor struct {
	pre, post []uint32
}

func (p templateProcessor) Process(dst, ids []uint32) []uint32 {
	dst = append(dst, p.pre...)
	dst = append(dst, ids...)
	return append(dst, p.post...)
}

func newTemplateProcessor(raw json.RawMessage) (PostProcessor, error) {
	var s struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("post_processor TemplateProcessing: %w", err)
	}
	var p templateProcessor
	seen := false
	for _, item := range s.Single {
		switch {
		case item.Sequence != nil:
			if seen {
				return nil, fmt.Errorf("post_processor TemplateProcessing: sequence appears twice in single")
			}
			seen = true
		case item.SpecialToken != nil:
			st, ok := s.SpecialTokens[item.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q is not defined", item.SpecialToken.ID)
			}
			if seen {
				p.post = append(p.post, st.IDs...)
			} else {
				p.pre = append(p.pre, st.IDs...)
			}
		}
	}
	if !seen {
		return nil, fmt.Errorf("post_processor TemplateProcessing: single has no sequence")
	}
	return p, nil
}

type sequenceProcessor []PostProcessor

func (seq sequenceProcessor) Process(dst, ids []uint32) []uint32 {
	for _, p := range seq {
		ids = p.Process(nil, ids)
	}
	return append(dst, ids...)
}
