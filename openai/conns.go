package openai

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultMaxClients bounds the in-memory connections kept at once: one per
// client host with a request in flight, plus idle ones up to the bound.
const DefaultMaxClients = 256

// maxRecvBytes bounds one answer message from the router (an embedding
// batch is the largest: 128 vectors of a few thousand floats).
const maxRecvBytes = 64 << 20

// conns keeps one in-memory gRPC connection per client host, so that the
// router sees each HTTP client as its own peer (rate limits are per peer
// when a request carries no key). The number of connections is bounded:
// idle ones are closed first, least recently used; when every one is busy
// a new host is refused with RESOURCE_EXHAUSTED rather than merged with
// another client.
type conns struct {
	lis *Listener
	max int

	mu    sync.Mutex
	byKey map[string]*pooledConn
	tick  uint64 // orders uses, for least-recently-used eviction
	done  bool
}

type pooledConn struct {
	cc       *grpc.ClientConn
	users    int
	lastUsed uint64
}

func newConns(lis *Listener, max int) *conns {
	if max <= 0 {
		max = DefaultMaxClients
	}
	return &conns{lis: lis, max: max, byKey: map[string]*pooledConn{}}
}

// errTooManyClients is returned when every connection is busy.
type errTooManyClients int

func (e errTooManyClients) Error() string {
	return fmt.Sprintf("more than %d client hosts have requests in flight; retry later", int(e))
}

// get returns the connection for the client at remote (host:port, as
// http.Request.RemoteAddr holds it); release must be called when the
// request ends.
func (p *conns) get(remote string) (*grpc.ClientConn, func(), error) {
	host, port, err := net.SplitHostPort(remote)
	if err != nil {
		host, port = remote, "0"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, nil, errClosed
	}
	pc := p.byKey[host]
	if pc == nil {
		if len(p.byKey) >= p.max && !p.evictIdle() {
			return nil, nil, errTooManyClients(p.max)
		}
		addr := clientAddr(host, port)
		cc, err := grpc.NewClient("passthrough:///kvgate-http",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return p.lis.dial(ctx, addr) }),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)))
		if err != nil {
			return nil, nil, fmt.Errorf("in-process connection: %w", err)
		}
		pc = &pooledConn{cc: cc}
		p.byKey[host] = pc
	}
	p.tick++
	pc.users++
	pc.lastUsed = p.tick
	var once sync.Once
	return pc.cc, func() {
		once.Do(func() {
			p.mu.Lock()
			pc.users--
			p.mu.Unlock()
		})
	}, nil
}

// evictIdle closes the least recently used idle connection; false when
// none is idle. p.mu is held.
func (p *conns) evictIdle() bool {
	var (
		victim string
		oldest *pooledConn
	)
	for k, pc := range p.byKey {
		if pc.users == 0 && (oldest == nil || pc.lastUsed < oldest.lastUsed) {
			victim, oldest = k, pc
		}
	}
	if oldest == nil {
		return false
	}
	delete(p.byKey, victim)
	_ = oldest.cc.Close()
	return true
}

// size is how many connections are kept.
func (p *conns) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey)
}

// close closes every connection; later gets fail.
func (p *conns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for k, pc := range p.byKey {
		_ = pc.cc.Close()
		delete(p.byKey, k)
	}
}

// clientAddr is the address the router sees for the client: a TCP address
// when host is an IP (as http.Server reports it), else a named one.
func clientAddr(host, port string) net.Addr {
	if ip := net.ParseIP(host); ip != nil {
		p, _ := net.LookupPort("tcp", port)
		return &net.TCPAddr{IP: ip, Port: p}
	}
	return inprocAddr(net.JoinHostPort(host, port))
}
