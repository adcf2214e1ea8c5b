package server

import (
	"container/list"
	"context"
	"net"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/peer"
)

// rateLimiter is a token bucket per client key. Keys are kept as 64-bit
// hashes, never as the client's bytes (a key may be a credential, and a
// hostile client may send megabytes of it), and at most maxKeys of them, the
// least recently seen forgotten first, so its memory is bounded whatever
// clients send.
type rateLimiter struct {
	rate    float64 // tokens per second, and the bucket's size
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[uint64]*list.Element // of *bucket
	lru     list.List                // front: most recently seen
}

type bucket struct {
	key    uint64
	tokens float64
	at     time.Time
}

func newRateLimiter(rate float64, maxKeys int, now func() time.Time) *rateLimiter {
	return &rateLimiter{rate: rate, maxKeys: maxKeys, now: now, buckets: make(map[uint64]*list.Element)}
}

// allow takes one token from key's bucket, reporting whether there was one.
// A key seen for the first time starts with a full bucket.
func (l *rateLimiter) allow(key string) bool {
	h := xxhash.Sum64String(key)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if e, ok := l.buckets[h]; ok {
		l.lru.MoveToFront(e)
		b = e.Value.(*bucket)
		b.tokens = min(l.rate, b.tokens+now.Sub(b.at).Seconds()*l.rate)
		b.at = now
	} else {
		if l.lru.Len() >= l.maxKeys {
			oldest := l.lru.Back()
			delete(l.buckets, oldest.Value.(*bucket).key)
			l.lru.Remove(oldest)
		}
		b = &bucket{key: h, tokens: l.rate, at: now}
		l.buckets[h] = l.lru.PushFront(b)
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// keys is how many keys the limiter remembers.
func (l *rateLimiter) keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// authorizationHeader is the key clientKey falls back to.
var authorizationHeader = []string{"authorization"}

// clientKey identifies the client a request is rate limited as: its routing
// key, else its authorization metadata, else its address (without the port,
// which changes with every connection).
func clientKey(ctx context.Context) string {
	if k := incomingHeader(ctx, routingKeyHeaders); k != "" {
		return "key:" + k
	}
	if k := incomingHeader(ctx, authorizationHeader); k != "" {
		return "auth:" + k
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr := p.Addr.String()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		return "peer:" + addr
	}
	return ""
}
