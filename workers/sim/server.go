package sim

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
)

// Server is an engine served over gRPC on a TCP listener: what tests and
// `kvgate sim` start when they want a worker at an address.
type Server struct {
	engine *Engine
	grpc   *grpc.Server
	lis    net.Listener
	done   chan struct{}
	stop   sync.Once
}

// Start creates an engine for cfg and serves it on addr ("127.0.0.1:0"
// picks a free port) in the background.
// A prefill engine's bootstrap endpoint listens on the same host.
func Start(cfg Config, addr string) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen address %q: %w", addr, err)
	}
	e, err := newEngine(cfg, host)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("sim: listen on %s: %w", addr, err)
	}
	s := &Server{engine: e, grpc: grpc.NewServer(), lis: lis, done: make(chan struct{})}
	e.Register(s.grpc)
	go func() {
		defer close(s.done)
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			e.log.Error("serve", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Engine returns the engine behind the server, for faults and stats.
func (s *Server) Engine() *Engine { return s.engine }

// Stop ends the server at once, like a killed engine: open streams fail on
// the client side, then the engine is closed. It is idempotent.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.grpc.Stop()
		s.engine.Close()
		<-s.done
	})
}
