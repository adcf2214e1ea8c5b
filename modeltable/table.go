// Package modeltable is the router's one record of the models it serves. A
// name maps to an Entry: the model's text stack (tokenizer, chat template and
// their caches), the policies that place its requests by worker role (and,
// with prefill/decode disaggregation, its pairing), the page size of its
// routing tree, its placer and its state (a tokenizer loading, or none).
//
// A router serving one model (the default) is a table of one entry, named "",
// that every worker serves; with --enable-igw the table holds an entry per
// model its workers report, added as they join. Request routing, KV-event
// routing, tree and tokenizer metrics, Explain, ListModels and tokenizer
// loading all read this table, so both modes run the same code.
//
// The table is generic in its placer: the package that places requests keeps
// its placer's type to itself, while the table owns which placer serves which
// model.
package modeltable

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Grouping says how workers are told apart by model. It is the one place
// that decides which model a worker serves.
type Grouping bool

const (
	// OneModel: every worker serves the router's one model, named "",
	// whatever name it reports.
	OneModel Grouping = false
	// ByName: a worker serves the model it reports in GetModelInfo
	// (--enable-igw).
	ByName Grouping = true
)

// NameOf is the name of the model w serves.
func (g Grouping) NameOf(w *workers.Worker) string {
	if g == ByName {
		return w.Info().Model
	}
	return ""
}

// A Spec is what a model's routing is built from: its policies by worker
// role (RoleRegular, or RolePrefill and RoleDecode with PD), its PD pairing
// and the page size of its routing tree.
type Spec struct {
	Policies map[workers.Role]policy.Policy
	// PD, when set, serves the model's requests disaggregated; the
	// policies are then its prefill and decode policies.
	PD       *pd.Dispatcher
	PageSize int
}

// Table maps model names to their entries. Entries are immutable: a change
// (a tokenizer loaded) publishes a new entry, and the map itself is
// replaced, never changed, so readers on the request path take no lock.
type Table[P any] struct {
	grouping Grouping
	// placer builds an entry's placer; it is called for every entry
	// published, so a placer always sees its entry's current text.
	placer func(*Entry[P]) P

	mu     sync.Mutex // serializes writers
	byName atomic.Pointer[map[string]*Entry[P]]
}

// New returns an empty table whose workers are told apart by g, and whose
// entries get their placer from placer.
func New[P any](g Grouping, placer func(*Entry[P]) P) *Table[P] {
	t := &Table[P]{grouping: g, placer: placer}
	t.byName.Store(&map[string]*Entry[P]{})
	return t
}

// Grouping says how the table tells workers apart.
func (t *Table[P]) Grouping() Grouping { return t.grouping }

// Get is the entry of the model named name, nil when it is not served.
func (t *Table[P]) Get(name string) *Entry[P] { return (*t.byName.Load())[name] }

// Of is the entry of the model w serves, nil while that model is not set up.
func (t *Table[P]) Of(w *workers.Worker) *Entry[P] { return t.Get(t.grouping.NameOf(w)) }

// All are the entries, by name.
func (t *Table[P]) All() []*Entry[P] {
	out := slices.Collect(maps.Values(*t.byName.Load()))
	slices.SortFunc(out, func(a, b *Entry[P]) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Len is the number of models served.
func (t *Table[P]) Len() int { return len(*t.byName.Load()) }

// Policies are every model's policies, for what every policy must hear of
// (a worker removed).
func (t *Table[P]) Policies() []policy.Policy {
	var out []policy.Policy
	for _, e := range t.All() {
		out = append(out, e.Policies()...)
	}
	return out
}

// Workers are the registered workers of the model named name.
func (t *Table[P]) Workers(reg *workers.Registry, name string) []*workers.Worker {
	var out []*workers.Worker
	for _, w := range reg.Snapshot() {
		if t.grouping.NameOf(w) == name {
			out = append(out, w)
		}
	}
	return out
}

// Ensure adds the model named name, built by build, unless it is served; it
// returns the model's entry and whether this call added it. A new entry's
// tokenizer is loading (see SetText): it serves token ids at once.
func (t *Table[P]) Ensure(name string, build func() (Spec, error)) (e *Entry[P], added bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.Get(name); e != nil {
		return e, false, nil
	}
	if t.grouping == OneModel && name != "" {
		return nil, false, fmt.Errorf("model %q: a router without --enable-igw serves one model", name)
	}
	spec, err := build()
	if err != nil {
		return nil, false, fmt.Errorf("model %q: %w", name, err)
	}
	if len(spec.Policies) == 0 {
		return nil, false, fmt.Errorf("model %q: a policy is required", name)
	}
	e = &Entry[P]{Name: name, grouping: t.grouping, policies: maps.Clone(spec.Policies), PD: spec.PD,
		PageSize: spec.PageSize, TextLoading: true, ready: make(chan struct{})}
	t.publish(e)
	return e, true, nil
}

// SetText gives the model its text stack (text nil: it has none and serves
// token ids only; why says why, for the log and ListModels) and ends its
// loading: the channel of Entry.Ready closes. A model that has no text may
// be given one later (a tokenizer served by a worker that joined late).
func (t *Table[P]) SetText(name string, text Text) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.Get(name)
	if cur == nil {
		return fmt.Errorf("model %q is not served", name)
	}
	e := *cur
	e.TextLoading = false
	e.setText(text)
	t.publish(&e)
	if cur.TextLoading {
		close(e.ready)
	}
	return nil
}

// CheckVocab records the vocabulary size (0: no tokenizer) that the
// model's workers are checked against from now on, before the tokenizer is
// served: a worker that joins meanwhile is checked by the caller's look at
// the registered workers or by the check at its joining.
func (t *Table[P]) CheckVocab(name string, size int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.Get(name)
	if cur == nil {
		return fmt.Errorf("model %q is not served", name)
	}
	e := *cur
	e.VocabChecked, e.CheckedVocab = true, size
	t.publish(&e)
	return nil
}

// CheckedVocab is the vocabulary size w is checked against, and whether its
// model checks one yet.
func (t *Table[P]) CheckedVocab(w *workers.Worker) (int, bool) {
	if e := t.Of(w); e != nil && e.VocabChecked {
		return e.CheckedVocab, true
	}
	return 0, false
}

// publish puts e in place of the entry of its name; call with t.mu held.
func (t *Table[P]) publish(e *Entry[P]) {
	if t.placer != nil {
		e.Placer = t.placer(e)
	}
	next := maps.Clone(*t.byName.Load())
	next[e.Name] = e
	t.byName.Store(&next)
}
