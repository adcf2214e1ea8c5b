package workers

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrWorkerExists is wrapped by Add, Replace and Join when a worker with the
// same URL is already registered.
var ErrWorkerExists = errors.New("worker already registered")

// ErrIncompatible is wrapped by the errors of a ConnectOptions.Admit that
// refuses a worker: the engine answers, but what it serves does not fit the
// fleet (a smaller vocabulary than the tokenizer's, for instance).
var ErrIncompatible = errors.New("worker incompatible with the fleet")

// ErrWorkerNotFound is wrapped by Remove and Replace when the worker is not
// registered (any more).
var ErrWorkerNotFound = errors.New("worker not registered")

// Snapshot is one generation of the registry: the workers registered at that
// moment, in registration order. A snapshot never changes once published, so
// a policy can hold one for the length of a decision (or cache what it derives
// from it, keyed by Generation) without locks; the workers in it are shared
// and their health, load and breakers keep changing.
type Snapshot struct {
	// Generation increases by one with every change to the registry; the
	// empty registry is generation 0.
	Generation uint64
	// Workers must not be modified.
	Workers []*Worker
	// byURL indexes Workers by URL, so that Get (once per KV event batch,
	// per Admin call) does not scan a fleet of thousands; nil in a
	// snapshot built by hand, which index then scans.
	byURL map[string]int
	// byRole holds Workers split by role, for Role; nil in a snapshot built
	// by hand, for which Role builds the split on each call.
	byRole *[numRoles][]*Worker
}

// numRoles is the number of Role values, which index Snapshot.byRole.
const numRoles = int(RoleDecode) + 1

// newSnapshot publishes ws as generation gen, indexed by URL.
func newSnapshot(gen uint64, ws []*Worker) *Snapshot {
	s := &Snapshot{Generation: gen, Workers: ws, byURL: make(map[string]int, len(ws))}
	for i, w := range ws {
		s.byURL[w.url] = i
	}
	s.byRole = new([numRoles][]*Worker)
	for _, w := range ws {
		if r := int(w.role); r >= 0 && r < numRoles {
			s.byRole[r] = append(s.byRole[r], w)
		}
	}
	return s
}

// Role returns the snapshot's workers of one role, in registration order,
// healthy or not, or nil if none has it. Unlike WithRole's, the slice is the
// snapshot's, computed once when it was published, and must not be
// modified: the server asks for it on every request, and a slice per
// request was an allocation as large as the fleet.
func (s *Snapshot) Role(role Role) []*Worker {
	if s.byRole == nil || role < 0 || int(role) >= numRoles {
		return s.WithRole(role)
	}
	return s.byRole[role]
}

// WithRole returns the snapshot's workers of one role, in registration order,
// healthy or not, or nil if none has it. The slice is the caller's own, so
// it counts first and allocates once; the request path reads Role instead.
func (s *Snapshot) WithRole(role Role) []*Worker {
	n := 0
	for _, w := range s.Workers {
		if w.role == role {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]*Worker, 0, n)
	for _, w := range s.Workers {
		if w.role == role {
			out = append(out, w)
		}
	}
	return out
}

// Get returns the worker with the given canonical URL (as Worker.URL).
func (s *Snapshot) Get(url string) (*Worker, bool) {
	i := s.index(url)
	if i < 0 {
		return nil, false
	}
	return s.Workers[i], true
}

func (s *Snapshot) index(url string) int {
	if s.byURL == nil {
		return slices.IndexFunc(s.Workers, func(w *Worker) bool { return w.url == url })
	}
	if i, ok := s.byURL[url]; ok {
		return i
	}
	return -1
}

// Change is one step from a generation to the next, as Watch reports it.
type Change struct {
	// Generation is the registry's generation after the change.
	Generation uint64
	// Added and Removed are the workers that entered and left. A Replace
	// reports the old worker as Removed and the new one as Added.
	Added, Removed []*Worker
}

// Registry holds the workers the router knows as a sequence of immutable
// snapshots. Readers load the current snapshot with one atomic read and never
// wait for a writer; writers (Add, Remove, Replace) are serialized, each
// publishes a new generation and then tells the watchers, so that policies,
// trees, event subscriptions and metrics follow changes instead of polling.
type Registry struct {
	cur atomic.Pointer[Snapshot]

	// mu serializes writers and the notifications they send, so watchers
	// see changes in generation order.
	mu sync.Mutex

	watchMu   sync.Mutex
	watchers  map[uint64]func(Change)
	nextWatch uint64
}

// NewRegistry returns an empty registry (generation 0).
func NewRegistry() *Registry {
	r := &Registry{watchers: map[uint64]func(Change){}}
	r.cur.Store(&Snapshot{})
	return r
}

// Current returns the current snapshot. It never blocks.
func (r *Registry) Current() *Snapshot { return r.cur.Load() }

// Add registers w at the end of the order. A worker whose URL is already
// registered is refused with ErrWorkerExists.
func (r *Registry) Add(w *Worker) error { return r.AddAll(w) }

// AddAll registers ws at the end of the order, in one generation (an
// engine's data-parallel ranks arrive together). If any URL is already
// registered, or given twice, none is added and ErrWorkerExists is returned.
func (r *Registry) AddAll(ws ...*Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	for i, w := range ws {
		if cur.index(w.url) >= 0 || slices.ContainsFunc(ws[:i], func(o *Worker) bool { return o.url == w.url }) {
			return fmt.Errorf("worker %s: %w", w.url, ErrWorkerExists)
		}
	}
	r.publishLocked(append(slices.Clip(cur.Workers), ws...), slices.Clone(ws), nil)
	return nil
}

// Remove unregisters the worker with the given address (as Get accepts it)
// and returns it. The registry does not close it: the caller drains it
// (Worker.SetDraining, Worker.WaitIdle) and then closes it, so that requests
// already on it finish.
func (r *Registry) Remove(addr string) (*Worker, error) {
	url, err := CanonicalName(addr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	i := cur.index(url)
	if i < 0 {
		return nil, fmt.Errorf("worker %s: %w", url, ErrWorkerNotFound)
	}
	w := cur.Workers[i]
	r.publishLocked(slices.Delete(slices.Clone(cur.Workers), i, i+1), nil, []*Worker{w})
	return w, nil
}

// Engine returns the workers addr names: the worker registered under that
// name (a whole engine, or one rank as url@rank), or else every rank target
// of the engine at that address, in registration order. It is empty when
// nothing matches.
func (r *Registry) Engine(addr string) []*Worker {
	name, err := CanonicalName(addr)
	if err != nil {
		return nil
	}
	cur := r.Current()
	if w, ok := cur.Get(name); ok {
		return []*Worker{w}
	}
	var out []*Worker
	for _, w := range cur.Workers {
		if w.rank >= 0 && w.endpoint == name {
			out = append(out, w)
		}
	}
	return out
}

// RemoveAll unregisters ws in one generation (an engine's ranks leave
// together). Every one must be registered, or none is removed and
// ErrWorkerNotFound is returned. As with Remove, the caller closes them.
func (r *Registry) RemoveAll(ws ...*Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	for _, w := range ws {
		if !slices.Contains(cur.Workers, w) {
			return fmt.Errorf("worker %s: %w", w.url, ErrWorkerNotFound)
		}
	}
	rest := slices.DeleteFunc(slices.Clone(cur.Workers), func(w *Worker) bool { return slices.Contains(ws, w) })
	r.publishLocked(rest, nil, slices.Clone(ws))
	return nil
}

// Replace puts next in old's place (same position in the order) in one new
// generation. It is how a placeholder for an engine that was unreachable at
// start-up becomes the connected worker (see Join). old must be registered
// (the same *Worker, ErrWorkerNotFound otherwise); next may have another URL
// only if no other worker has it. The caller owns old afterwards.
func (r *Registry) Replace(old, next *Worker) error { return r.ReplaceWith(old, next) }

// ReplaceWith is Replace with several workers taking old's place, in order:
// a placeholder becomes an engine's data-parallel ranks.
func (r *Registry) ReplaceWith(old *Worker, next ...*Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	i := slices.Index(cur.Workers, old)
	if i < 0 {
		return fmt.Errorf("worker %s: %w", old.url, ErrWorkerNotFound)
	}
	for k, n := range next {
		if j := cur.index(n.url); (j >= 0 && j != i) || slices.ContainsFunc(next[:k], func(o *Worker) bool { return o.url == n.url }) {
			return fmt.Errorf("worker %s: %w", n.url, ErrWorkerExists)
		}
	}
	ws := slices.Concat(cur.Workers[:i], next, cur.Workers[i+1:])
	r.publishLocked(ws, slices.Clone(next), []*Worker{old})
	return nil
}

// publishLocked stores the next generation and notifies the watchers, with
// r.mu held.
func (r *Registry) publishLocked(ws []*Worker, added, removed []*Worker) {
	gen := r.cur.Load().Generation + 1
	r.cur.Store(newSnapshot(gen, ws))

	r.watchMu.Lock()
	fns := make([]func(Change), 0, len(r.watchers))
	ids := make([]uint64, 0, len(r.watchers))
	for id := range r.watchers {
		ids = append(ids, id)
	}
	slices.Sort(ids) // in Watch order, so that a run is reproducible
	for _, id := range ids {
		fns = append(fns, r.watchers[id])
	}
	r.watchMu.Unlock()

	c := Change{Generation: gen, Added: added, Removed: removed}
	for _, fn := range fns {
		fn(c)
	}
}

// Watch calls fn after every later change, synchronously on the writer's
// goroutine and in generation order, until stop is called. fn must be quick
// and must not add, remove or replace workers (that would deadlock); it may
// read the registry and call stop. A notification already under way when stop
// is called may still arrive; none for a change that starts after stop
// returns. To start from a consistent state, read Current after Watch
// returns and skip changes whose Generation is not above its Generation.
func (r *Registry) Watch(fn func(Change)) (stop func()) {
	r.watchMu.Lock()
	id := r.nextWatch
	r.nextWatch++
	r.watchers[id] = fn
	r.watchMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.watchMu.Lock()
			delete(r.watchers, id)
			r.watchMu.Unlock()
		})
	}
}

// Snapshot returns the registered workers. The slice is the caller's own; the
// workers in it are shared and their health and load keep changing.
func (r *Registry) Snapshot() []*Worker {
	return slices.Clone(r.Current().Workers)
}

// WithRole returns the registered workers of one role, in registration
// order, healthy or not.
func (r *Registry) WithRole(role Role) []*Worker {
	return r.Current().WithRole(role)
}

// Get returns the worker with the given address (grpc://host:port,
// grpcs://host:port or host:port).
// A rank target is named url@rank (see RankName).
func (r *Registry) Get(addr string) (*Worker, bool) {
	url, err := CanonicalName(addr)
	if err != nil {
		return nil, false
	}
	return r.Current().Get(url)
}

// Close closes every registered worker's connection.
func (r *Registry) Close() error {
	var errs []error
	for _, w := range r.Current().Workers {
		if err := w.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
