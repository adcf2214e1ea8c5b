package workers

import "sync/atomic"

// polledQueue is the engine's own queue as its last load poll reported it:
// how many requests were waiting there, and how many of this router's
// requests on the worker had ended when that poll began. Each of ours that
// ends after the poll frees a running place the engine gives to one of
// those waiting, so the queue it reported shrinks by one without waiting
// for the next poll to say so.
type polledQueue struct{ p atomic.Pointer[queueMark] }

// queueMark is one poll's figures, swapped whole so a reader never pairs one
// poll's waiting count with another's release count.
type queueMark struct{ waiting, released int64 }

func (q *polledQueue) record(waiting int, released int64) {
	q.p.Store(&queueMark{waiting: int64(waiting), released: released})
}

// EngineQueued is how many requests the engine's own queue still holds as
// far as this router can tell: those its last load poll reported waiting,
// less the requests of ours on the worker that ended since that poll began
// (each let one waiting request run). It is 0 for an engine that never
// reported a load. A request sent to an engine whose queue is not empty
// waits there for KV or a running place while the ones admitted before it
// evict the prefix it was routed for; late binding holds it in the router
// instead (see waitq.Saturation).
func (w *Worker) EngineQueued() int {
	m := w.queue.p.Load()
	if m == nil {
		return 0
	}
	return int(max(m.waiting-(w.released.Load()-m.released), 0))
}

// EngineQueued is the requests still waiting in the engine's own queue as
// far as the router can tell (see Worker.EngineQueued).
func (v View) EngineQueued() int { return v.w.EngineQueued() }
