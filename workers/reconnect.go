package workers

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// reconnects counts the times a worker's connection became ready again
// after it was lost. An engine restarted at its address between two health
// checks never fails enough of them to be marked unhealthy, so the health
// monitor would not read its model information again (refreshLimits) and
// the worker would keep the old engine's limits, or go on serving as a
// model the new one does not serve. Its connection shows the restart: the
// monitor reads the information again at the first passing check after a
// reconnection. A network blip counts too, which costs one more read.
type reconnects struct {
	n atomic.Int64
}

// watchReconnects counts conn's returns to READY until it is closed. The
// first READY is not one: a connection that has just answered a call may
// still report CONNECTING, its state updated after its first picker.
func watchReconnects(conn *grpc.ClientConn) *reconnects {
	r := &reconnects{}
	s := conn.GetState()
	go func() {
		wasReady := s == connectivity.Ready
		for s != connectivity.Shutdown {
			if !conn.WaitForStateChange(context.Background(), s) {
				return
			}
			next := conn.GetState()
			if next == connectivity.Ready && s != connectivity.Ready {
				if wasReady {
					r.n.Add(1)
				}
				wasReady = true
			}
			s = next
		}
	}()
	return r
}

// Reconnections is how many times w's connection became ready again after
// it was lost since w connected (0 for a worker built without one).
func (w *Worker) Reconnections() int64 {
	if w.reconnects == nil {
		return 0
	}
	return w.reconnects.n.Load()
}
