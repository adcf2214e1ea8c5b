package openai

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// The in-memory connections are one per client host, each carrying the
// host as its peer address, and bounded: a new host evicts an idle one,
// and is refused when every connection is busy.
func TestConnsPerClientHostAreBounded(t *testing.T) {
	lis := NewListener()
	peers := make(chan string, 10)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		peers <- p.Addr.String()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	pool := newConns(lis, 2)
	t.Cleanup(pool.close)

	call := func(remote string) (release func(), err error) {
		t.Helper()
		cc, release, err := pool.get(remote)
		if err != nil {
			return nil, err
		}
		if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		return release, nil
	}
	var first func() // the first request's release, held until the end
	for i, step := range []struct {
		remote, wantPeer string
		release, full    bool
	}{
		{remote: "10.0.0.1:5000", wantPeer: "10.0.0.1:5000"},
		{remote: "10.0.0.1:6000", wantPeer: "10.0.0.1:5000", release: true}, // the same host shares its connection
		{remote: "[fd00::2]:7000", wantPeer: "[fd00::2]:7000"},
		{remote: "10.0.0.3:8000", full: true}, // both connections are busy
	} {
		release, err := call(step.remote)
		if step.full {
			var tm errTooManyClients
			if !errors.As(err, &tm) {
				t.Fatalf("%s: %v, want too many clients", step.remote, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := <-peers; got != step.wantPeer {
			t.Errorf("%s: the server saw %s, want %s", step.remote, got, step.wantPeer)
		}
		if step.release {
			release()
		}
		if i == 0 {
			first = release
		}
	}
	// 10.0.0.1 has one request in flight still (the first step's).
	if _, err := call("10.0.0.3:8000"); err == nil {
		t.Fatal("a third host was served while both connections are busy")
	}
	first()
	if _, err := call("10.0.0.3:8000"); err != nil {
		t.Fatalf("after 10.0.0.1 went idle: %v", err)
	}
	if got := <-peers; got != "10.0.0.3:8000" {
		t.Errorf("the server saw %s", got)
	}
	if n := pool.size(); n != 2 {
		t.Errorf("%d connections kept, want the bound 2", n)
	}
}
