package openai

import (
	"context"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// Listener is an in-memory net.Listener for the router's own gRPC server.
// The HTTP front dials it instead of a socket, so that every request it
// translates passes the interceptors, validation, admission, rate limits,
// routing, retries, metrics and tracing a gRPC client's request passes:
// one path, not a second copy.
//
// Each connection's remote address is the HTTP client's, given when it is
// dialed, so the gRPC side sees the caller where it reads the peer
// (admission's rate-limit key, logs). A client cannot choose it through a
// header: only the HTTP server's view of the TCP peer reaches it.
type Listener struct {
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

// NewListener returns an open in-memory listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// errClosed is what Accept and dial return once the listener is closed.
var errClosed = errors.New("openai: in-process listener closed")

// Accept waits for the next in-memory connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errClosed
	}
}

// Close stops Accept; connections already made stay open until their ends
// close them.
func (l *Listener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener; it has no network address.
func (l *Listener) Addr() net.Addr { return inprocAddr("kvgate-http") }

// dial connects to the listener as a client whose address is remote.
func (l *Listener) dial(ctx context.Context, remote net.Addr) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- &inprocConn{Conn: server, remote: remote}:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, errClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// inprocAddr is the address of the in-memory listener.
type inprocAddr string

func (a inprocAddr) Network() string { return "inproc" }
func (a inprocAddr) String() string  { return string(a) }

// inprocConn is the server's end of an in-memory connection. Its type is
// what Credentials recognises: no socket accepted from the network has it.
type inprocConn struct {
	net.Conn
	remote net.Addr
}

func (c *inprocConn) RemoteAddr() net.Addr { return c.remote }

// Credentials wraps the gRPC server's transport credentials so that the
// in-memory connections of l skip the TLS handshake: they never leave the
// process, and the HTTP front has already done TLS (and mutual TLS) with
// the real client. Every other connection is handed to tls unchanged. A nil
// tls means the server is plaintext, and needs no wrapping: Credentials
// returns nil.
func Credentials(tls credentials.TransportCredentials) credentials.TransportCredentials {
	if tls == nil {
		return nil
	}
	return inprocCreds{tls}
}

type inprocCreds struct {
	credentials.TransportCredentials
}

func (c inprocCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(*inprocConn); ok {
		return conn, inprocAuth{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c inprocCreds) Clone() credentials.TransportCredentials {
	return inprocCreds{c.TransportCredentials.Clone()}
}

// inprocAuth describes an in-memory connection: the HTTP front
// authenticated the transport with TLS when TLS is configured.
type inprocAuth struct{ credentials.CommonAuthInfo }

func (inprocAuth) AuthType() string { return "kvgate-http" }
