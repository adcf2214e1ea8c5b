package tokenize

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
)

// Config is what kvgate needs from tokenizer_config.json.
type Config struct {
	BOSToken, EOSToken, PadToken, UnkToken string
	// ChatTemplate is the default chat template: chat_template when it is a string, or
	// the entry named "default" when it is a list of {name, template}.
	ChatTemplate string
	// ChatTemplates holds every named template (a string chat_template is "default").
	ChatTemplates            map[string]string
	AddBOSToken, AddEOSToken *bool
	// ModelMaxLength is model_max_length, clamped to math.MaxInt (files use 1e30 for
	// "unlimited").
	ModelMaxLength int
}

// tokenField is a special-token entry: a string, null, or an AddedToken object.
type tokenField string

func (t *tokenField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = tokenField(s)
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("token must be a string or an object with content: %w", err)
	}
	*t = tokenField(obj.Content)
	return nil
}

func parseConfig(b []byte) (Config, error) {
	var cfg Config
	if len(b) == 0 {
		return cfg, nil
	}
	var raw struct {
		BOS            tokenField      `json:"bos_token"`
		EOS            tokenField      `json:"eos_token"`
		Pad            tokenField      `json:"pad_token"`
		Unk            tokenField      `json:"unk_token"`
		ChatTemplate   json.RawMessage `json:"chat_template"`
		AddBOS         *bool           `json:"add_bos_token"`
		AddEOS         *bool           `json:"add_eos_token"`
		ModelMaxLength *float64        `json:"model_max_length"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return cfg, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	cfg.BOSToken, cfg.EOSToken = string(raw.BOS), string(raw.EOS)
	cfg.PadToken, cfg.UnkToken = string(raw.Pad), string(raw.Unk)
	cfg.AddBOSToken, cfg.AddEOSToken = raw.AddBOS, raw.AddEOS
	if raw.ModelMaxLength != nil {
		switch v := *raw.ModelMaxLength; {
		case v >= math.MaxInt:
			cfg.ModelMaxLength = math.MaxInt
		case v > 0:
			cfg.ModelMaxLength = int(v)
		}
	}
	if len(raw.ChatTemplate) > 0 && string(raw.ChatTemplate) != "null" {
		var s string
		if err := json.Unmarshal(raw.ChatTemplate, &s); err == nil {
			cfg.ChatTemplate = s
			cfg.ChatTemplates = map[string]string{"default": s}
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw.ChatTemplate, &list); err != nil {
				return cfg, fmt.Errorf("tokenizer_config.json: chat_template is neither a string nor a list of {name, template}: %w", err)
			}
			cfg.ChatTemplates = make(map[string]string, len(list))
			for _, t := range list {
				cfg.ChatTemplates[t.Name] = t.Template
			}
			cfg.ChatTemplate = cfg.ChatTemplates["default"]
		}
	}
	return cfg, nil
}

// clone returns a deep copy, so callers cannot change the tokenizer's copy.
func (c Config) clone() Config {
	out := c
	out.ChatTemplates = maps.Clone(c.ChatTemplates)
	if c.AddBOSToken != nil {
		v := *c.AddBOSToken
		out.AddBOSToken = &v
	}
	if c.AddEOSToken != nil {
		v := *c.AddEOSToken
		out.AddEOSToken = &v
	}
	return out
}
