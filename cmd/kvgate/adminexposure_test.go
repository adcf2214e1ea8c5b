package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/auth"
)

// Admin is never served on a listener other hosts reach without an Admin
// key: kvgate refuses to start, and says how to fix it.
func TestAdminNeverExposedWithoutAdminKey(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		refused bool
	}{
		{"beside Router on every interface", []string{"--host", "0.0.0.0"}, true},
		{"beside Router on every IPv6 interface", []string{"--host", "::"}, true},
		{"beside Router on a host's address", []string{"--host", "10.1.2.3"}, true},
		{"the Router key is not an Admin key", []string{"--host", "0.0.0.0", "--api-key", "r"}, true},
		{"an Admin key equal to the Router key", []string{"--host", "0.0.0.0", "--api-key", "k", "--admin-api-key", "k"}, true},
		{"on its own port, on every interface", []string{"--admin-port", "0", "--admin-host", "0.0.0.0"}, true},
		{"beside Router on loopback", nil, false},
		{"beside Router on localhost", []string{"--host", "localhost"}, false},
		{"on its own loopback port, Router public", []string{"--host", "0.0.0.0", "--admin-port", "0"}, false},
		{"public, with an Admin key", []string{"--host", "0.0.0.0", "--admin-api-key", "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaults(t, tt.args...)
			if err := cfg.resolveKeys(func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			host := cfg.host
			if cfg.adminPort >= 0 {
				host = cfg.adminHost
			}
			err := cfg.adminExposure(host)
			if tt.refused != (err != nil) {
				t.Fatalf("adminExposure(%s) = %v, want refused %v", host, err, tt.refused)
			}
			if err != nil && (!strings.Contains(err.Error(), "--admin-api-key") || !strings.Contains(err.Error(), "--admin-port")) {
				t.Errorf("the refusal does not say both ways out: %v", err)
			}
		})
	}

	// serve itself refuses, before it starts anything.
	cfg := defaults(t, "--host", "0.0.0.0", "--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0")
	done := make(chan error, 1)
	go func() { done <- serve(context.Background(), cfg, slog.New(slog.DiscardHandler), nil) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not loopback") {
			t.Fatalf("serve --host 0.0.0.0: %v, want a refusal", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve --host 0.0.0.0 without an Admin key started")
	}
}

// The safe public shape: Router on every interface, Admin on its own
// loopback port. Admin is not on the public port at all.
func TestAdminOnLoopbackBesidePublicRouter(t *testing.T) {
	l := startServe(t, "--host", "0.0.0.0", "--admin-port", "0", "--api-key", "router-secret")
	if !strings.HasPrefix(l.admin, "127.0.0.1:") {
		t.Fatalf("Admin listens on %s, want loopback", l.admin)
	}
	dial := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer("router-secret")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kvgatev1.NewAdminClient(dial(l.grpc)).RemoveWorker(ctx, &kvgatev1.RemoveWorkerRequest{Address: "x:1"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Admin on the public port: %v, want UNIMPLEMENTED", err)
	}
	if _, err := kvgatev1.NewAdminClient(dial(l.admin)).ListWorkers(ctx, &kvgatev1.ListWorkersRequest{}); err != nil {
		t.Errorf("Admin on its loopback port: %v", err)
	}
}
