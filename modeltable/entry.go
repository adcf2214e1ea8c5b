package modeltable

import (
	"strings"

	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// Text is a model's text stack as it was found: the tokenizer and chat
// template (with their L0/L1 caches), and where they came from.
type Text struct {
	// Model is nil when the model has none: it serves token ids only.
	Model *textmodel.Model
	// Source says where Model came from (a path, or "worker URL").
	Source string
	// FromWorkers: no path was configured, so a worker of the model that
	// joins later may still serve a tokenizer (GetTokenizer).
	FromWorkers bool
	// Err says why the model has no text when one was expected (a path
	// that does not load, a tokenizer that does not fit the workers).
	Err error
}

// An Entry is one model the router serves. It is never changed once
// published; the table publishes a new one instead.
type Entry[P any] struct {
	// Name is the model as its workers report it (GetModelInfo), which
	// requests give in their model field; "" is the one model of a router
	// without --enable-igw, which every worker serves.
	Name string
	// Text is the model's tokenizer and chat template; nil: token ids only.
	Text *textmodel.Model
	// TokenizerSource says where Text came from, for ListModels.
	TokenizerSource string
	// TextFromWorkers: Text is nil and no path was configured, so a worker
	// that joins may serve one (see Text.FromWorkers).
	TextFromWorkers bool
	// TextError says why the model has no text when one was expected.
	TextError error
	// TextLoading says the tokenizer is still loading: text, Chat and stop
	// strings answer UNAVAILABLE meanwhile, token ids are served.
	TextLoading bool
	// Thinks: the chat template writes <think> (or, without a template,
	// the vocabulary has <think> and </think> tokens), so
	// --reasoning-parser auto parses the model's reasoning.
	Thinks bool
	// ToolFormat is the tool-call format the chat template writes
	// (ToolFormatDetected false: it writes none), which --tool-call-parser
	// auto parses.
	ToolFormat         parse.ToolFormat
	ToolFormatDetected bool
	// VocabChecked: the model's workers are checked against a tokenizer of
	// CheckedVocab ids (0: none, only their agreement is checked) as they
	// join; see Table.CheckVocab.
	VocabChecked bool
	CheckedVocab int
	// PD, when set, serves the model's requests disaggregated.
	PD *pd.Dispatcher
	// PageSize is the page size of the model's routing tree.
	PageSize int
	// Placer places the model's requests on its workers.
	Placer P

	grouping Grouping
	policies map[workers.Role]policy.Policy
	// ready is closed when the tokenizer has loaded or failed to; it is
	// shared by the entries that replace one another.
	ready chan struct{}
}

func (e *Entry[P]) setText(t Text) {
	e.Text, e.TokenizerSource, e.TextFromWorkers, e.TextError = t.Model, t.Source, t.Model == nil && t.FromWorkers, t.Err
	e.Thinks, e.ToolFormat, e.ToolFormatDetected = false, parse.ToolFormat{}, false
	if t.Model != nil {
		e.Thinks = thinks(t.Model)
		e.ToolFormat, e.ToolFormatDetected = parse.DetectToolFormat(t.Model.TemplateText())
	}
}

// Ready is closed when the model's tokenizer has loaded, or failed to.
func (e *Entry[P]) Ready() <-chan struct{} { return e.ready }

// Policy is the model's policy for workers of role; nil when none places
// that role.
func (e *Entry[P]) Policy(role workers.Role) policy.Policy { return e.policies[role] }

// Main is the policy whose decision places the request: the regular policy,
// or with PD the prefill policy (whose tree and metrics are exported).
func (e *Entry[P]) Main() policy.Policy {
	if e.PD != nil {
		return e.policies[workers.RolePrefill]
	}
	return e.policies[workers.RoleRegular]
}

// Policies are the model's policies, the main one first.
func (e *Entry[P]) Policies() []policy.Policy {
	out := []policy.Policy{e.Main()}
	if e.PD != nil {
		out = append(out, e.policies[workers.RoleDecode])
	}
	return out
}

// Serves reports whether w is one of the model's workers.
func (e *Entry[P]) Serves(w *workers.Worker) bool { return e.grouping.NameOf(w) == e.Name }

// Candidates are the workers of role serving the model. For the one model
// they are the registry snapshot's own slice, shared by every request and
// never modified (the policies only read their candidates); a named model's
// are filtered into a slice of the request's own.
func (e *Entry[P]) Candidates(reg *workers.Registry, role workers.Role) []*workers.Worker {
	ws := reg.Current().Role(role)
	if e.grouping == OneModel {
		return ws
	}
	var out []*workers.Worker
	for _, w := range ws {
		if e.Serves(w) {
			out = append(out, w)
		}
	}
	return out
}

// TokenizerVocab is the size of the model's tokenizer's vocabulary, 0
// without one.
func (e *Entry[P]) TokenizerVocab() int {
	if e.Text == nil {
		return 0
	}
	return e.Text.Tokenizer().VocabSize()
}

// PromptVocab is the vocabulary w's prompt ids must fall in: the engine's
// vocab_size, or the tokenizer's when the engine reports none (engines that
// leave GetModelInfo's fields empty exist; checking against nothing let any
// id reach them).
func (e *Entry[P]) PromptVocab(w *workers.Worker) int {
	if v := w.Info().VocabSize; v > 0 {
		return v
	}
	return e.TokenizerVocab()
}

// OutputVocab is the vocabulary w's output ids must fall in: the smaller of
// the engine's and the tokenizer's, since the router decodes the output and
// an id beyond the tokenizer (engines pad vocab_size to a multiple of 64 or
// 128) has no text. An id outside it is the engine's fault.
func (e *Entry[P]) OutputVocab(w *workers.Worker) int {
	v, t := w.Info().VocabSize, e.TokenizerVocab()
	if v <= 0 || (t > 0 && t < v) {
		return t
	}
	return v
}

// thinks reports whether a model writes its reasoning in <think> blocks: a
// chat template renders the markers its model answers with (Qwen3's and
// DeepSeek-R1's write <think>; DeepSeek V3's, whose vocabulary also has
// the tokens, does not); without a template, the vocabulary tells.
func thinks(m *textmodel.Model) bool {
	if tmpl := m.TemplateText(); tmpl != "" {
		return strings.Contains(tmpl, parse.Qwen3.Start)
	}
	_, start := m.Tokenizer().TokenToID(parse.Qwen3.Start)
	_, end := m.Tokenizer().TokenToID(parse.Qwen3.End)
	return start && end
}
