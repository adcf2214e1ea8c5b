package tree

import "sync/atomic"

// Roster is a fixed list of tenant names (a policy's candidate workers)
// that MatchInsertAmong reports matches for by position; BlockIndex's
// MatchAmong takes one too, as a list of backends.
//
// Match reports every tenant holding part of a prompt by name, and a caller
// wanting them by position must look each name up: with a chat template's
// header every worker holds, that is a string-keyed lookup and a result
// entry per worker per request (4,000 of each at 4,000 workers). A Roster
// resolves its names to the tree's tenant ids once, and again only after
// the tree binds or unbinds a name (a new tenant, a removal), so a match
// costs an array read per holder on the prompt's path.
//
// A Roster is safe for concurrent use and may be shared by the selections
// using the same candidates. Use it with one tree or block index: it keeps
// one resolution, and alternating between two would redo it every time.
type Roster struct {
	names []string
	res   atomic.Pointer[rosterIDs]
}

// rosterIDs is a Roster resolved against one state of the bindings of a
// Tree or a BlockIndex (owner), whose fields it fills.
type rosterIDs struct {
	owner    any
	bindings uint64
	// A Tree's: positions by tenant id (1 + position, 0 if absent) and
	// tenant ids by position (-1 if not a tenant).
	pos []int32
	ids []int32
	// A BlockIndex's: backend ids by position (0 if not a backend), and
	// the largest.
	backendIDs []uint32
	top        uint32
}

// NewRoster returns a roster of names, which the caller must not modify
// afterwards.
func NewRoster(names []string) *Roster { return &Roster{names: names} }

// Len returns the number of names.
func (r *Roster) Len() int { return len(r.names) }

// resolve returns r resolved against t's current bindings. The caller holds
// t.mu (read or write): bindings change only under the write lock.
func (t *Tree) resolve(r *Roster) *rosterIDs {
	if x := r.res.Load(); x != nil && x.owner == t && x.bindings == t.bindings {
		return x
	}
	x := &rosterIDs{owner: t, bindings: t.bindings, pos: make([]int32, len(t.tenants)), ids: make([]int32, len(r.names))}
	for i, name := range r.names {
		x.ids[i] = -1
		if id, ok := t.ids[name]; ok {
			x.pos[id] = int32(i + 1)
			x.ids[i] = int32(id)
		}
	}
	r.res.Store(x)
	return x
}

// TenantTokensAmong sets dst[i] (len r.Len()) to the stored tokens r's i-th
// tenant holds, as TenantTokens would, for each i that need accepts; the
// others are left alone. It takes the read lock once for all of them.
func (t *Tree) TenantTokensAmong(r *Roster, dst []int, need func(i int) bool) {
	if len(dst) != len(r.names) {
		panic("tree: TenantTokensAmong: dst and roster differ in length")
	}
	t.rlockSelection()
	defer t.mu.RUnlock()
	x := t.resolve(r)
	for i, id := range x.ids {
		if !need(i) {
			continue
		}
		dst[i] = 0
		if id >= 0 {
			dst[i] = t.tenants[id].tokens
		}
	}
}

// resultAmong is result by roster position: tokens[i] becomes what r's
// i-th tenant holds of the path (0 for none, or not a tenant), and the
// returned slice its confirmed part, nil when no tenant of r holds any
// confirmed. The caller holds t.mu.
func (t *Tree) resultAmong(r *Roster, s *scratch, tokens []int) (confirmed []int) {
	pos := t.resolve(r).pos
	clear(tokens)
	at := 0
	for _, st := range s.path {
		at += st.l
		for _, h := range st.n.holders {
			id := h.id()
			if int(id) >= len(pos) || pos[id] == 0 {
				continue // not in the roster
			}
			i := pos[id] - 1
			tokens[i] = at
			if h.confirmed() {
				if confirmed == nil {
					confirmed = make([]int, len(tokens))
				}
				confirmed[i] = at
			}
		}
	}
	return confirmed
}

// MatchInsertAmong is MatchInsert for the tenants of r: it fills tokens
// (len r.Len()) with each one's match (what Match.Tenants would say for
// it, 0 for none), asks choose for the position of the tenant that will
// serve ids (-1 for none), and inserts ids for it speculatively in the same
// descent. Tenants outside r are not reported. It returns the matches'
// confirmed parts (nil when all are 0) and the insert's tick (0 if none).
// choose runs under the tree's write lock: it must be quick and must not
// call the tree.
func (t *Tree) MatchInsertAmong(ids []uint32, r *Roster, tokens []int, choose func() int) (confirmed []int, tick uint64) {
	if len(tokens) != len(r.names) {
		panic("tree: MatchInsertAmong: tokens and roster differ in length")
	}
	ids = t.cut(ids)
	t.lockSelection()
	defer t.mu.Unlock()
	s := &t.scratch
	pos := t.descend(ids, s)
	confirmed = t.resultAmong(r, s, tokens)
	if chosen := choose(); chosen >= 0 && len(ids) > 0 {
		id := t.insert(ids, pos, s.path, r.names[chosen], 0, false)
		tick = t.clock
		t.enforce(id)
	}
	return confirmed, tick
}
