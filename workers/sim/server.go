package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// ErrServerStopped is returned by Restart after Stop.
var ErrServerStopped = errors.New("sim: server stopped")

// Process is an engine served over gRPC on a TCP listener: what tests and
// `kvgate sim` start when they want a worker at an address. Kill and Restart
// model an engine process killed and started again at the same address.
type Process struct {
	cfg  Config
	host string
	addr string // fixed at Start, so that Restart comes back on the same port

	mu      sync.Mutex
	engine  *Engine
	grpc    *grpc.Server
	done    chan struct{} // closed when the current Serve returns
	running bool
	stopped bool
	// served is closed when serve starts an engine, and replaced: a ZMQ
	// publisher follows restarts with it.
	served chan struct{}
}

// Start creates an engine for cfg and serves it on addr ("127.0.0.1:0"
// picks a free port) in the background, over TLS when cfg.TLS is set.
// A prefill engine's bootstrap endpoint listens on the same host.
func Start(cfg Config, addr string) (*Process, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen address %q: %w", addr, err)
	}
	s := &Process{cfg: cfg, host: host, addr: addr}
	if err := s.serve(); err != nil {
		return nil, err
	}
	return s, nil
}

// serve starts a fresh engine on s.addr; s.mu is held or s is not shared yet.
func (s *Process) serve() error {
	e, err := newEngine(s.cfg, s.host)
	if err != nil {
		return err
	}
	// Go's listeners set SO_REUSEADDR on Unix, so the port of a killed
	// server can be bound again at once despite connections in TIME_WAIT.
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		e.Close()
		return fmt.Errorf("sim: listen on %s: %w", s.addr, err)
	}
	opts := e.rpcFaultOptions()
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	if on := s.cfg.Calls; on != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			on.ObserveCall(info.FullMethod, md)
			return h(ctx, req)
		}), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			on.ObserveCall(info.FullMethod, md)
			return h(srv, ss)
		}))
	}
	g := grpc.NewServer(opts...)
	e.Register(g)
	e.registerStandardHealth(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			e.log.Error("serve", "addr", lis.Addr().String(), "err", err)
		}
	}()
	s.addr = lis.Addr().String()
	if e.boot != nil {
		// A restarted prefill engine comes back on the same bootstrap port.
		s.cfg.BootstrapPort = e.BootstrapPort()
	}
	s.engine, s.grpc, s.done, s.running = e, g, done, true
	if s.served != nil {
		close(s.served)
	}
	s.served = make(chan struct{})
	return nil
}

// restarted returns a channel closed when the next engine starts.
func (s *Process) restarted() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Addr is the host:port the server listens on (also while killed).
func (s *Process) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Engine returns the engine behind the server, for faults and stats. After
// Restart it is a new engine.
func (s *Process) Engine() *Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engine
}

// Kill ends the server abruptly, as kill -9 ends an engine: the listener and
// every connection close at once, so in-flight streams fail with UNAVAILABLE
// on the client side and new connections are refused. The engine's state,
// its KV cache included, is lost. Restart serves again. Killing a server that
// is not running does nothing.
func (s *Process) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Process) killLocked() {
	if !s.running {
		return
	}
	s.grpc.Stop()
	s.engine.Close()
	<-s.done
	s.running = false
}

// Restart serves a new engine at the same host:port after Kill, as a
// restarted engine: empty KV cache, zeroed counters, and the faults of the
// Config given to Start (faults set later are forgotten). It fails if the
// server is running, was stopped, or the port has been taken meanwhile.
func (s *Process) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return ErrServerStopped
	case s.running:
		return fmt.Errorf("sim: restart %s: the server is running; Kill it first", s.addr)
	}
	return s.serve()
}

// RestartWith is Restart for an engine started again with other settings
// (a larger KV cache, another context length): adjust changes the Config
// that this and later restarts serve.
func (s *Process) RestartWith(adjust func(*Config)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.stopped {
		return fmt.Errorf("sim: restart %s: the server is running or stopped", s.addr)
	}
	adjust(&s.cfg)
	return s.serve()
}

// Stop ends the server for good, like Kill, and makes Restart fail. It is
// idempotent.
func (s *Process) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.killLocked()
}
