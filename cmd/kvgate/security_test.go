package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/auth"
	"github.com/kvgate/kvgate/internal/testutil"
)

// startServe runs `kvgate serve` with args on free ports until the test
// ends, and returns where it listens.
func startServe(t *testing.T, args ...string) listening {
	t.Helper()
	cfg := defaults(t, append([]string{"--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0"}, args...)...)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { ready <- l }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	select {
	case l := <-ready:
		return l
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}
	return listening{}
}

// kvgate serving mutual TLS, with a Router key, an Admin key and Admin on a
// port of its own, as an operator would run it on a shared network.
func TestServeWithTLSAuthAndAdminPort(t *testing.T) {
	dir := t.TempDir()
	ca, clientCA, rogue := testutil.NewCA(t, "server-ca"), testutil.NewCA(t, "client-ca"), testutil.NewCA(t, "rogue")
	srvCert, srvKey := ca.Issue(t, 2, true)
	l := startServe(t,
		"--tls-cert-file", testutil.WriteFile(t, dir, "cert.pem", srvCert),
		"--tls-key-file", testutil.WriteFile(t, dir, "key.pem", srvKey),
		"--tls-client-ca-file", testutil.WriteFile(t, dir, "client-ca.pem", clientCA.PEM),
		"--api-key", "router-secret", "--admin-api-key", "admin-secret", "--admin-port", "0")
	if l.admin == "" || l.admin == l.grpc {
		t.Fatalf("Admin listens on %q, want a port of its own", l.admin)
	}

	tlsCreds := func(from *testutil.CA) credentials.TransportCredentials {
		c := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		if from != nil {
			certPEM, keyPEM := from.Issue(t, 9, false)
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{cert}
		}
		return credentials.NewTLS(c)
	}
	dial := func(addr string, creds credentials.TransportCredentials, key string) *grpc.ClientConn {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
		if key != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
		}
		c, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	req := &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(2)}}
	generate := func(c *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := kvgatev1.NewRouterClient(c).Generate(ctx, req)
		if err != nil {
			return err
		}
		for {
			m, err := st.Recv()
			if err != nil {
				return err
			}
			if m.GetComplete() != nil {
				return nil
			}
		}
	}
	listWorkers := func(c *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := kvgatev1.NewAdminClient(c).ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		return err
	}

	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"plaintext is refused", func() error { return generate(dial(l.grpc, insecure.NewCredentials(), "router-secret")) }, codes.Unavailable},
		{"TLS without a client certificate is refused", func() error { return generate(dial(l.grpc, tlsCreds(nil), "router-secret")) }, codes.Unavailable},
		{"a client certificate from another CA is refused", func() error { return generate(dial(l.grpc, tlsCreds(rogue), "router-secret")) }, codes.Unavailable},
		{"mutual TLS without a key", func() error { return generate(dial(l.grpc, tlsCreds(clientCA), "")) }, codes.Unauthenticated},
		{"mutual TLS with a wrong key", func() error { return generate(dial(l.grpc, tlsCreds(clientCA), "guess")) }, codes.Unauthenticated},
		{"mutual TLS with the Router key", func() error { return generate(dial(l.grpc, tlsCreds(clientCA), "router-secret")) }, codes.OK},
		{"Admin is not on the Router port", func() error { return listWorkers(dial(l.grpc, tlsCreds(clientCA), "admin-secret")) }, codes.Unimplemented},
		{"Admin with the Router key", func() error { return listWorkers(dial(l.admin, tlsCreds(clientCA), "router-secret")) }, codes.Unauthenticated},
		{"Admin with the Admin key", func() error { return listWorkers(dial(l.admin, tlsCreds(clientCA), "admin-secret")) }, codes.OK},
		{"health needs no key", func() error {
			_, err := healthpb.NewHealthClient(dial(l.grpc, tlsCreds(clientCA), "")).Check(context.Background(), &healthpb.HealthCheckRequest{})
			return err
		}, codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.want {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Fatalf("the refusal repeats a key: %v", err)
			}
		})
	}
}
