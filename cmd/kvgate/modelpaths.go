package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// modelPaths is --model-path: a path for the router's model, and with
// --enable-igw entries MODEL=PATH giving a model its own tokenizer and chat
// template. The flag may be repeated.
type modelPaths struct {
	def     *string // the plain path, textmodel.Sources.ModelPath
	byModel map[string]string
}

func (m *modelPaths) String() string {
	if m == nil || m.def == nil {
		return ""
	}
	parts := []string{}
	if *m.def != "" {
		parts = append(parts, *m.def)
	}
	for name, p := range m.byModel {
		parts = append(parts, name+"="+p)
	}
	return strings.Join(parts, ",")
}

// Set takes PATH or MODEL=PATH (a value with '=' is always MODEL=PATH).
func (m *modelPaths) Set(v string) error {
	name, path, named := strings.Cut(v, "=")
	switch {
	case !named:
		if *m.def != "" && *m.def != v {
			return fmt.Errorf("given twice (%q and %q); per-model paths are MODEL=PATH", *m.def, v)
		}
		*m.def = v
	case name == "" || path == "":
		return fmt.Errorf("%q: give MODEL=PATH", v)
	default:
		if m.byModel == nil {
			m.byModel = map[string]string{}
		}
		if old, dup := m.byModel[name]; dup && old != path {
			return fmt.Errorf("model %q given twice (%q and %q)", name, old, path)
		}
		m.byModel[name] = path
	}
	return nil
}

// sources are the per-model sources; each takes the router-wide chat
// template override too.
func (m *modelPaths) sources(igw bool, shared textmodel.Sources) (map[string]textmodel.Sources, error) {
	if len(m.byModel) == 0 {
		return nil, nil
	}
	if !igw {
		return nil, errors.New("--model-path MODEL=PATH gives one model of several its tokenizer: it needs --enable-igw")
	}
	out := make(map[string]textmodel.Sources, len(m.byModel))
	for name, p := range m.byModel {
		out[name] = textmodel.Sources{ModelPath: p, ChatTemplatePath: shared.ChatTemplatePath}
	}
	return out, nil
}
