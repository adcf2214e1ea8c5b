package template

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Template is a compiled chat template. It is immutable and safe for
// concurrent use; each Render has its own state.
type Template struct {
	body []node
	size int
}

// Options are per-render settings.
type Options struct {
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
}

// Compile parses a Jinja template. Syntax errors are *SyntaxError values
// that carry the line number.
func Compile(source string) (*Template, error) {
	toks, err := lex(source)
	if err != nil {
		return nil, err
	}
	body, err := parse(toks)
	if err != nil {
		return nil, err
	}
	if err := checkNames(body); err != nil {
		return nil, err
	}
	return &Template{body: body, size: len(source)}, nil
}

// Render renders the template with vars (messages, tools, documents,
// add_generation_prompt, bos_token, eos_token and any chat_template_kwargs).
// Values are JSON-like Go values: nil, bool, ints, float64, string, []any,
// *OrderedMap (keeps key order) or map[string]any (keys sorted).
//
// A template that calls raise_exception(msg) fails with a *RaisedError
// whose text is msg (errors.Is(err, ErrTemplateRaised) holds); other
// failures are Python-style errors ("TypeError: ...", "UndefinedError: ...").
func (t *Template) Render(vars map[string]any, opts Options) (out string, err error) {
	r := &renderer{now: opts.Now}
	if r.now == nil {
		r.now = time.Now
	}
	return t.renderWith(r, vars)
}

// renderWith renders with r, which keeps the render's counts (its steps)
// for the caller to read.
func (t *Template) renderWith(r *renderer, vars map[string]any) (out string, err error) {
	root := &scope{vars: make(map[string]any, len(vars))}
	for k, v := range vars {
		if root.vars[k], err = normalizeVar(v); err != nil {
			return "", fmt.Errorf("template: variable %s: %w", k, err)
		}
	}
	var b strings.Builder
	b.Grow(t.size + t.size/2)
	r.out = &b
	if err := r.execBody(t.body, newScope(root)); err != nil {
		var raised *RaisedError
		if errors.As(err, &raised) {
			return "", err // the template's own message, unadorned
		}
		return "", fmt.Errorf("template: %w", err)
	}
	return b.String(), nil
}
