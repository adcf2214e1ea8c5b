package router

import (
	"slices"
	"sync"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// kvRoute hands each worker's KV events to the policy that places requests
// on it (with prefill/decode disaggregation the prefill and decode policies
// differ), and keeps a removed worker's late events away from the policy
// that has forgotten it.
//
// A removed worker's subscription stops inside the registry notification,
// but watchers run in registration order, so the policy's Forget may come
// first while one of the worker's batches is being applied: that batch would
// bring the forgotten worker back into the tree. Every delivery therefore
// holds a read lock while it checks that the worker is registered and
// applies the batch, and the watcher takes the write lock before the policy
// forgets: by then the registry no longer has the worker, so deliveries that
// were under way have finished and later ones are turned away.
type kvRoute struct {
	reg *workers.Registry
	// policyOf is the policy placing requests on a worker (its model's,
	// for its role); nil while its model is not served yet.
	policyOf func(*workers.Worker) policy.Policy

	mu sync.RWMutex
}

// handler returns the handler of worker's policy; call with r.mu held.
func (r *kvRoute) handler(worker string) workers.KVEventHandler {
	w, ok := r.reg.Get(worker)
	if !ok {
		return nil
	}
	h, _ := r.policyOf(w).(workers.KVEventHandler)
	return h
}

func (r *kvRoute) ApplyKVEvents(worker string, b *workers.KVEventBatch) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h := r.handler(worker); h != nil {
		h.ApplyKVEvents(worker, b)
	}
}

func (r *kvRoute) ResetKVEvents(worker string, rank int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h := r.handler(worker); h != nil {
		h.ResetKVEvents(worker, rank)
	}
}

func (r *kvRoute) SetKVEventMode(worker string, exact bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h := r.handler(worker); h != nil {
		h.SetKVEventMode(worker, exact)
	}
}

// settle returns once no delivery that may have seen the registry before
// the change being notified is under way.
func (r *kvRoute) settle() {
	r.mu.Lock()
	r.mu.Unlock() //nolint:staticcheck // an empty critical section is the point: a barrier
}

// consumesKVEvents reports whether any of the configured policies (the
// router-wide ones, or a model's own) mirrors the engines' caches from their
// KV events, as the policy registry says.
func consumesKVEvents(cfg Config) bool {
	names := cfg.modelRouting("").policies(cfg.PD)
	for name := range cfg.Models {
		names = append(names, cfg.modelRouting(name).policies(cfg.PD)...)
	}
	return slices.ContainsFunc(names, policy.MirrorsKVEvents)
}

// unusabler is implemented by the policies that can refuse a worker's
// events (policy.CacheAware, policy.VllmCacheAware).
type unusabler interface{ KVEventsUnusable(worker string) string }

// kvStatus reports each worker's subscription as ListWorkers and the
// metrics show it: the stream's own state, except that a worker whose
// events its policy refused (a block size other than its page size) is
// approximate, with the reason as its last error.
type kvStatus struct {
	subs  *workers.KVSubscriptions
	route *kvRoute
}

func (k kvStatus) Status(url string) (workers.KVEventStatus, bool) {
	st, ok := k.subs.Status(url)
	if !ok {
		return st, ok
	}
	w, found := k.route.reg.Get(url)
	if !found {
		return st, true
	}
	k.route.mu.RLock()
	h := k.route.handler(w.URL())
	k.route.mu.RUnlock()
	if u, isU := h.(unusabler); isU {
		if why := u.KVEventsUnusable(w.URL()); why != "" {
			st.Mode, st.LastError = workers.KVModeApproximate, why
		}
	}
	return st, true
}
