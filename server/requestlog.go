package server

import (
	"context"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
)

// requestLabel is the id a Router call is logged under. The call's log line
// ("finished call") is written by the access log (accessLog), which sees the
// context of the call's start, before the request is read; the handler
// names the request here once it knows the id, and the line reads it at the
// end. Until then it holds the x-request-id metadata, so that a request
// refused before it was read (admission, the rate limit) is named too.
type requestLabel struct {
	mu sync.Mutex
	id string
	// waitReason and waitTime say why and how long the request waited in
	// the router before it was bound to an engine ("": it did not).
	waitReason string
	waitTime   time.Duration
}

type labelKey struct{}

// withLabel returns ctx with a label for the call, holding its x-request-id
// metadata (bounded, since it has not been validated yet).
func withLabel(ctx context.Context) context.Context {
	return context.WithValue(ctx, labelKey{}, &requestLabel{id: truncateID(incomingHeader(ctx, requestIDHeaders))})
}

// labelOf returns the call's label; nil (on which set and get do nothing)
// outside a Router call.
func labelOf(ctx context.Context) *requestLabel {
	l, _ := ctx.Value(labelKey{}).(*requestLabel)
	return l
}

func (l *requestLabel) set(id string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.id = id
	l.mu.Unlock()
}

// waited records a wait in the router (late binding); several waits (a
// retry's) add up under the last reason.
func (l *requestLabel) waited(reason string, d time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.waitReason = reason
	l.waitTime += d
	l.mu.Unlock()
}

func (l *requestLabel) get() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// labelFields adds request_id to a call's log line when the call has one,
// and why and how long it waited in the router when it did.
func labelFields(ctx context.Context) logging.Fields {
	l := labelOf(ctx)
	var f logging.Fields
	if id := l.get(); id != "" {
		f = logging.Fields{"request_id", id}
	}
	if l != nil {
		l.mu.Lock()
		if l.waitReason != "" {
			f = append(f, "queue_wait_reason", l.waitReason, "queue_wait_seconds", l.waitTime.Seconds())
		}
		l.mu.Unlock()
	}
	return f
}
