package workers

import "unsafe"

// View is a worker as a routing policy sees it: its address, health, load
// and KV state, read at the moment the policy asks. A View cannot dial,
// close, mark or count requests on its worker, so "a policy never dials" is
// a property of the type a policy is handed, not a convention it keeps.
//
// Views compare equal exactly when they view the same worker; the zero
// View views none (IsZero).
type View struct{ w *Worker }

// Views returns ws as views, without a copy: a policy reads the candidates
// of every request, and a copy per request would cost an allocation as
// large as the fleet. The result shares ws's memory; neither may be
// modified while the other is in use.
func Views(ws []*Worker) []View {
	if len(ws) == 0 {
		return nil
	}
	// A View is one *Worker, so the two slices have the same layout
	// (unsafe.Pointer rule 1; asserted below).
	return unsafe.Slice((*View)(unsafe.Pointer(unsafe.SliceData(ws))), len(ws))
}

// The layout Views relies on: a View is exactly one pointer.
var _ [unsafe.Sizeof(View{}) - unsafe.Sizeof((*Worker)(nil))]struct{}
var _ [unsafe.Sizeof((*Worker)(nil)) - unsafe.Sizeof(View{})]struct{}

// ViewOf returns w as a policy sees it.
func ViewOf(w *Worker) View { return View{w} }

// Worker returns the viewed worker, for whoever acts on a policy's choice
// (acquires it, dispatches to it). A policy only hands it on in its
// Decision; policy's tests check that it calls nothing on it.
func (v View) Worker() *Worker { return v.w }

// IsZero reports whether v views no worker.
func (v View) IsZero() bool { return v.w == nil }

// URL is the worker's address, which names it in trees, rings and metrics.
func (v View) URL() string { return v.w.url }

func (v View) String() string { return v.w.url }

// Available reports whether the worker may take a new request: healthy,
// not draining, and its breaker allows it.
func (v View) Available() bool { return v.w.Available() }

// Draining reports whether the worker is leaving the fleet.
func (v View) Draining() bool { return v.w.Draining() }

// Load is the number policies compare (see Worker.Load).
func (v View) Load() int { return v.w.Load() }

// EngineLoad is the engine's load as last polled.
func (v View) EngineLoad() Load { return v.w.EngineLoad() }

// PendingPrefill is the prompt tokens sent to the worker whose first token
// has not come back (see Worker.Prefilling).
func (v View) PendingPrefill() int { return v.w.PendingPrefill() }

// KVCapacityTokens is the engine's KV cache capacity in tokens, 0 when it
// reports none.
func (v View) KVCapacityTokens() int { return v.w.info.Load().KVCapacityTokens }

// MaxRunningRequests is how many requests the engine runs at once, 0 when
// it reports no limit: the capacity a policy judges the worker's load
// against.
func (v View) MaxRunningRequests() int { return v.w.info.Load().MaxRunningRequests }
