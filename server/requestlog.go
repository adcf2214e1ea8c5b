package server

import (
	"context"
	"sync"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
)

// requestLabel is the id a Router call is logged under. The call's log line
// ("finished call") is written by the logging interceptor, which sees the
// context of the call's start, before the request is read; the handler
// names the request here once it knows the id, and the line reads it at the
// end. Until then it holds the x-request-id metadata, so that a request
// refused before it was read (admission, the rate limit) is named too.
type requestLabel struct {
	mu sync.Mutex
	id string
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

func (l *requestLabel) get() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// labelFields adds request_id to a call's log line when the call has one.
func labelFields(ctx context.Context) logging.Fields {
	if id := labelOf(ctx).get(); id != "" {
		return logging.Fields{"request_id", id}
	}
	return nil
}
