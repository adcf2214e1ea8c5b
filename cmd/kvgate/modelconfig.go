package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// modelFile is --model-config: each model's own settings, for a router that
// serves many (--enable-igw), in YAML or JSON. What a model leaves out, the
// flags give.
type modelFile struct {
	Models map[string]modelEntry `json:"models"`
}

// modelEntry is one model's settings; a field left out takes the flag's
// value.
type modelEntry struct {
	Policy              string   `json:"policy"`
	PrefillPolicy       string   `json:"prefill_policy"`
	DecodePolicy        string   `json:"decode_policy"`
	CacheThreshold      *float64 `json:"cache_threshold"`
	BalanceAbsThreshold *int     `json:"balance_abs_threshold"`
	BalanceRelThreshold *float64 `json:"balance_rel_threshold"`
	// ModelPath takes --model-path's forms (a hub id too); TokenizerPath
	// and ChatTemplate are files, as --tokenizer-path and --chat-template.
	ModelPath     string `json:"model_path"`
	TokenizerPath string `json:"tokenizer_path"`
	ChatTemplate  string `json:"chat_template"`
}

// readModelConfig reads --model-config, when given, and adds its models'
// paths to --model-path's, to be found as the flag's are.
func (c *serveConfig) readModelConfig() error {
	if c.modelConfig == "" {
		return nil
	}
	if !c.igw && !c.discovery.enabled {
		return errors.New("--model-config gives models their own settings by name: it needs --enable-igw")
	}
	entries, err := readModelFile(c.modelConfig)
	if err != nil {
		return err
	}
	c.modelEntries = entries
	return c.text.models.addModelPaths(entries)
}

// readModelFile reads --model-config; a field it does not know is an error
// (a typo would otherwise be a setting silently not applied).
func readModelFile(path string) (map[string]modelEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--model-config: %w", err)
	}
	var f modelFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("--model-config %s: %w", path, err)
	}
	if len(f.Models) == 0 {
		return nil, fmt.Errorf("--model-config %s: no models (give them under \"models\", by name)", path)
	}
	for _, name := range slices.Sorted(maps.Keys(f.Models)) {
		if name == "" {
			return nil, fmt.Errorf("--model-config %s: a model needs a name", path)
		}
	}
	return f.Models, nil
}

// addModelPaths gives --model-path's per-model entries the file's model
// paths, so that they are found (hub ids included) as the flag's are; a
// model given a path both ways is refused.
func (m *modelPaths) addModelPaths(entries map[string]modelEntry) error {
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		if p := entries[name].ModelPath; p != "" {
			if old, dup := m.byModel[name]; dup {
				return fmt.Errorf("model %q: its path is given by --model-path (%q) and --model-config (%q); give it once", name, old, p)
			}
			if err := m.Set(name + "=" + p); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyModelFile puts the file's settings in the router's configuration:
// each model's routing, and the tokenizer and chat template files it names
// beside its model path.
func applyModelFile(g *router.Config, entries map[string]modelEntry, shared textmodel.Sources) {
	if len(entries) == 0 {
		return
	}
	g.Models = map[string]router.ModelConfig{}
	for name, e := range entries {
		g.Models[name] = router.ModelConfig{Policy: e.Policy, PrefillPolicy: e.PrefillPolicy, DecodePolicy: e.DecodePolicy,
			CacheThreshold: e.CacheThreshold, BalanceAbsThreshold: e.BalanceAbsThreshold, BalanceRelThreshold: e.BalanceRelThreshold}
		if e.TokenizerPath == "" && e.ChatTemplate == "" {
			continue
		}
		if g.ModelTexts == nil {
			g.ModelTexts = map[string]textmodel.Sources{}
		}
		src, ok := g.ModelTexts[name]
		if !ok {
			src = shared // the flags' paths, with the model's own files over them
		}
		if e.TokenizerPath != "" {
			src.TokenizerPath = e.TokenizerPath
		}
		if e.ChatTemplate != "" {
			src.ChatTemplatePath = e.ChatTemplate
		}
		g.ModelTexts[name] = src
	}
}
