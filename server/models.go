package server

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// A Model is one model the router serves: its tokenizer and chat template,
// and the policies that place its requests on the workers that report it.
// Each model has its own policy instances, so its routing tree, page size and
// budget are its own.
type Model struct {
	// Name is the model as its workers report it (GetModelInfo), which
	// requests give in their model field. Empty: the router's only model,
	// served by every worker whatever it reports.
	Name string
	// Text is the model's tokenizer and chat template; nil: token ids only.
	Text *textmodel.Model
	// Policy places whole requests, or with PD the prefill legs.
	Policy policy.Policy
	// PD, when set, serves the model's requests disaggregated.
	PD *pd.Dispatcher
	// TokenizerSource says where Text came from and PageSize is the page
	// size of the model's routing tree, for ListModels.
	TokenizerSource string
	PageSize        int
	// TextLoading says the tokenizer is still loading (Text is nil until
	// SetModelText): text, Chat and stop strings answer UNAVAILABLE
	// meanwhile, token ids are served.
	TextLoading bool
}

// route is a model as the pipeline uses it: the dispatcher that places its
// requests on its own workers.
type route struct {
	Model
	disp dispatcher
	// thinks: the chat template writes <think> (or, without a template,
	// the vocabulary has <think> and </think> tokens), so
	// --reasoning-parser auto parses the model's reasoning.
	thinks bool
	// toolFormat is the tool-call format the chat template writes
	// (detected: false when it writes none), which --tool-call-parser
	// auto parses.
	toolFormat parse.ToolFormat
	detected   bool
}

// serves reports whether w is one of the route's workers: every worker for
// the one model, else those that report its name.
func (r *route) serves(w *workers.Worker) bool { return r.Name == "" || w.Info().Model == r.Name }

// candidates are the workers of role serving the route's model. For the one
// model they are the registry snapshot's own slice, shared by every request
// and never modified (the policies only read their candidates); a named
// model's are filtered into a slice of the request's own.
func (r *route) candidates(reg *workers.Registry, role workers.Role) []*workers.Worker {
	ws := reg.Current().Role(role)
	if r.Name == "" {
		return ws
	}
	var out []*workers.Worker
	for _, w := range ws {
		if r.serves(w) {
			out = append(out, w)
		}
	}
	return out
}

// tokenizerVocab is the size of the route's tokenizer's vocabulary, 0
// without one.
func (r *route) tokenizerVocab() int {
	if r.Text == nil {
		return 0
	}
	return r.Text.Tokenizer().VocabSize()
}

// promptVocab is the vocabulary w's prompt ids must fall in: the engine's
// vocab_size, or the tokenizer's when the engine reports none (engines that
// leave GetModelInfo's fields empty exist; checking against nothing let any
// id reach them).
func (r *route) promptVocab(w *workers.Worker) int {
	if v := w.Info().VocabSize; v > 0 {
		return v
	}
	return r.tokenizerVocab()
}

// outputVocab is the vocabulary w's output ids must fall in: the smaller of
// the engine's and the tokenizer's, since the router decodes the output and
// an id beyond the tokenizer (engines pad vocab_size to a multiple of 64 or
// 128) has no text. An id outside it is the engine's fault.
func (r *route) outputVocab(w *workers.Worker) int {
	v, t := w.Info().VocabSize, r.tokenizerVocab()
	if v <= 0 || (t > 0 && t < v) {
		return t
	}
	return v
}

// noText is the status of a request that needs the model's tokenizer when
// it has none: UNAVAILABLE while it loads (a client retries), else
// FAILED_PRECONDITION saying what to configure.
func (r *route) noText(field string) error {
	if r.TextLoading {
		return status.Errorf(codes.Unavailable, "%s needs model %q's tokenizer, which is loading; retry in a moment", field, r.Name)
	}
	return status.Error(codes.FailedPrecondition, noTokenizer(field))
}

// routes are the models served; the table is replaced, never changed, so
// requests read it without a lock.
type routes struct {
	mu    sync.Mutex // serializes writers
	table atomic.Pointer[map[string]*route]
	// multi: models are told apart by name (--enable-igw); otherwise the
	// one model, named "", serves every request.
	multi bool
}

func (rs *routes) all() []*route {
	m := rs.table.Load()
	if m == nil {
		return nil
	}
	out := make([]*route, 0, len(*m))
	for _, r := range *m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *route) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (rs *routes) add(r *route) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	next := map[string]*route{}
	if cur := rs.table.Load(); cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	if _, dup := next[r.Name]; dup {
		return fmt.Errorf("model %q is already served", r.Name)
	}
	if !rs.multi && (r.Name != "" || len(next) > 0) {
		return fmt.Errorf("model %q: a router without --enable-igw serves one model", r.Name)
	}
	next[r.Name] = r
	rs.table.Store(&next)
	return nil
}

// replace puts r in place of the route of the same name.
func (rs *routes) replace(r *route) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur := rs.table.Load()
	if cur == nil || (*cur)[r.Name] == nil {
		return fmt.Errorf("model %q is not served", r.Name)
	}
	next := make(map[string]*route, len(*cur))
	for k, v := range *cur {
		next[k] = v
	}
	next[r.Name] = r
	rs.table.Store(&next)
	return nil
}

// maxModelName bounds the model field: names are short identifiers such as
// "meta-llama/Llama-3.1-8B-Instruct".
const maxModelName = 256

// route finds the model a request names. Without --enable-igw the one model
// serves every request; a name its workers do not report is NOT_FOUND, since
// the client expects another model. With --enable-igw the name may be omitted
// only while one model is served.
func (s *Server) route(name string) (*route, error) {
	if len(name) > maxModelName {
		return nil, invalid("model is %d bytes; the limit is %d", len(name), maxModelName)
	}
	table := s.routes.table.Load()
	if !s.routes.multi {
		r := (*table)[""]
		if name != "" && s.namesModels() && !s.servesName(name) {
			return nil, status.Errorf(codes.NotFound, "model %q is not served here; this router serves %s",
				name, s.describeServed())
		}
		return r, nil
	}
	if table != nil {
		if r, ok := (*table)[name]; ok {
			return r, nil
		}
	}
	if name == "" {
		switch rs := s.routes.all(); len(rs) {
		case 1:
			return rs[0], nil
		case 0:
			return nil, status.Error(codes.Unavailable, "no model is served yet: no worker has joined")
		default:
			return nil, invalid("model is empty and this router serves %d models (%s); name one", len(rs), s.describeServed())
		}
	}
	if s.servesName(name) {
		// A worker reports it, and its routing context is being set
		// up: a moment's wait will do.
		return nil, status.Errorf(codes.Unavailable, "model %q is starting: its workers are joining", name)
	}
	return nil, status.Errorf(codes.NotFound, "model %q is not served here; this router serves %s", name, s.describeServed())
}

// servesName reports whether a registered worker reports model name.
func (s *Server) servesName(name string) bool {
	for _, w := range s.reg.Current().Workers {
		if w.Info().Model == name {
			return true
		}
	}
	return false
}

// namesModels reports whether any registered worker reports its model's
// name (engines that do not cannot be told apart from others).
func (s *Server) namesModels() bool {
	return slices.ContainsFunc(s.reg.Current().Workers, func(w *workers.Worker) bool { return w.Info().Model != "" })
}

// describeServed names the models the workers report, for error messages.
func (s *Server) describeServed() string {
	var names []string
	for _, w := range s.reg.Current().Workers {
		if m := w.Info().Model; m != "" && !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	for _, r := range s.routes.all() {
		if r.Name != "" && !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return "no named model (its workers report none)"
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(names, ", ")
}

// AddModel starts serving a model (a router built with Config.MultiModel).
// The gateway adds each model when its first worker joins.
func (s *Server) AddModel(m Model) error {
	if m.Policy == nil {
		return fmt.Errorf("model %q: a policy is required", m.Name)
	}
	return s.routes.add(s.newRoute(m))
}

// SetModelText gives a model added with TextLoading its tokenizer and chat
// template (text nil: it has none, and serves token ids only).
func (s *Server) SetModelText(name string, text *textmodel.Model, source string) error {
	r := s.routes.get(name)
	if r == nil {
		return fmt.Errorf("model %q is not served", name)
	}
	m := r.Model
	m.Text, m.TokenizerSource, m.TextLoading = text, source, false
	return s.routes.replace(s.newRoute(m))
}

func (s *Server) newRoute(m Model) *route {
	r := &route{Model: m}
	if m.Text != nil {
		r.thinks = thinks(m.Text)
		r.toolFormat, r.detected = parse.DetectToolFormat(m.Text.TemplateText())
	}
	if m.PD != nil {
		r.disp = &pdDispatcher{s: s, r: r, pd: m.PD, prefill: m.Policy.Name(), decode: m.PD.DecodePolicyName()}
	} else {
		r.disp = &regularDispatcher{s: s, r: r, policy: m.Policy}
	}
	return r
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

func (rs *routes) get(name string) *route {
	if m := rs.table.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// servedModel is the model the workers report, for the metrics of a router
// serving one model (the first worker that names one).
func (s *Server) servedModel() string {
	for _, w := range s.reg.Current().Workers {
		if m := w.Info().Model; m != "" {
			return m
		}
	}
	return ""
}
