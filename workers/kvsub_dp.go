package workers

// One KV event subscription serves all data-parallel ranks of an engine:
// the engine has one SubscribeKvEvents stream, whose batches say which rank
// they come from (dp_rank) and are numbered per rank, which kvSub already
// tracks. dpHandler turns the engine's account into each rank target's:
// a batch of rank r is applied to url@r, a reset of rank r resets url@r,
// and the stream's mode applies to every rank.

import "slices"

// dpHandler is the handler of an engine's subscription when its ranks are
// targets. gone holds the ranks removed from the registry while the others
// stay; it is guarded by the subscription's callMu, which every handler
// call holds.
type dpHandler struct {
	h    KVEventHandler
	g    *dpGroup
	gone map[int]bool
}

func newDPHandler(h KVEventHandler, g *dpGroup) *dpHandler {
	return &dpHandler{h: h, g: g, gone: map[int]bool{}}
}

// target is rank's worker name, or false when the engine has no such rank
// target (a rank beyond the size it reported, or one removed).
func (d *dpHandler) target(rank int) (string, bool) {
	if rank < 0 || rank >= len(d.g.members) || d.gone[rank] {
		return "", false
	}
	return d.g.members[rank].url, true
}

func (d *dpHandler) ApplyKVEvents(_ string, b *KVEventBatch) {
	if name, ok := d.target(b.DPRank); ok {
		d.h.ApplyKVEvents(name, b)
	}
}

func (d *dpHandler) ResetKVEvents(_ string, rank int) {
	if name, ok := d.target(rank); ok {
		d.h.ResetKVEvents(name, rank)
	}
}

func (d *dpHandler) SetKVEventMode(_ string, exact bool) {
	for rank := range d.g.members {
		if name, ok := d.target(rank); ok {
			d.h.SetKVEventMode(name, exact)
		}
	}
}

// eventSource is what a registered worker's subscription reads and feeds:
// the worker's own stream, or for a rank target its engine's, shared with
// the other ranks. ok is false when there is nothing to subscribe to, or
// the engine's subscription already runs (under another rank).
func (s *KVSubscriptions) eventSource(w *Worker, present map[*Worker]bool, covered map[*dpGroup]bool) (src KVEventSource, url string, h KVEventHandler, ok bool) {
	g := w.group
	if g == nil {
		if src := s.source(w.URL()); src != nil {
			return src, w.URL(), s.cfg.Handler, true
		}
		src, ok = w.Backend().(KVEventSource)
		return src, w.URL(), s.cfg.Handler, ok
	}
	if covered[g] {
		return nil, "", nil, false
	}
	if src = s.source(g.endpoint); src == nil {
		if src, ok = g.backend.(KVEventSource); !ok {
			return nil, "", nil, false
		}
	}
	covered[g] = true
	dh := newDPHandler(s.cfg.Handler, g)
	// Ranks already gone when the subscription starts are never fed.
	for _, m := range g.members {
		dh.gone[m.rank] = !present[m]
	}
	return src, g.endpoint, dh, true
}

// source is the configured event source of the worker (or engine) at url,
// or nil when it has none and its backend's own stream is used.
func (s *KVSubscriptions) source(url string) KVEventSource {
	if src, ok := s.cfg.Sources[url]; ok {
		return src
	}
	for name, src := range s.cfg.Sources {
		if u, err := CanonicalName(name); err == nil && u == url {
			return src
		}
	}
	return nil
}

// rankRemovedLocked stops feeding a removed rank target from its engine's
// subscription, which goes on for the other ranks; with s.mu held.
func (s *KVSubscriptions) rankRemovedLocked(w *Worker) {
	for _, k := range s.subs {
		if dh, ok := k.handler.(*dpHandler); ok && dh.g == w.group {
			k.callMu.Lock()
			dh.gone[w.rank] = true
			k.callMu.Unlock()
		}
	}
}

// handOverLocked keeps an engine's subscription running when the rank it is
// filed under (w) leaves while other ranks stay: the subscription is filed
// under one of those, and w is no longer fed. Stopping it and starting
// another would lose the batches in between, which the remaining ranks'
// mirrors would never hear of. It reports false when no rank of the engine
// is left in snap; with s.mu held.
func (s *KVSubscriptions) handOverLocked(w *Worker, k *kvSub, snap *Snapshot) bool {
	for _, m := range w.group.members {
		if m == w || !slices.Contains(snap.Workers, m) {
			continue
		}
		s.rankRemovedLocked(w)
		delete(s.subs, w)
		s.subs[m] = k
		delete(s.byURL, w.url)
		return true
	}
	return false
}
