package workers_test

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// testPKI is a throw-away certificate authority with one server certificate
// (for 127.0.0.1) and one client certificate, written as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	caPool                                               *x509.CertPool
}

func newTestPKI(t *testing.T, name string) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca := testutil.NewCA(t, name+" CA")
	p := testPKI{caPool: ca.Pool(), caFile: testutil.WriteFile(t, dir, "ca.pem", ca.PEM)}
	cert, key := ca.Issue(t, 2, true)
	p.serverCert, p.serverKey = testutil.WriteFile(t, dir, "engine.pem", cert), testutil.WriteFile(t, dir, "engine-key.pem", key)
	cert, key = ca.Issue(t, 3, false)
	p.clientCert, p.clientKey = testutil.WriteFile(t, dir, "router.pem", cert), testutil.WriteFile(t, dir, "router-key.pem", key)
	return p
}

// startTLSSim serves a simulated engine over TLS with pki's server
// certificate; with mutual, it requires a client certificate from pki's CA.
func startTLSSim(t *testing.T, pki testPKI, mutual bool) *sim.Process {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize = 1000
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mutual {
		cfg.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.TLS.ClientCAs = pki.caPool
	}
	srv, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestConnectTLS connects to grpcs:// engines end to end: server-only TLS,
// mutual TLS, and the ways it fails (all UNAVAILABLE, with a message that
// names TLS).
func TestConnectTLS(t *testing.T) {
	pki, other := newTestPKI(t, "kvgate"), newTestPKI(t, "someone else")
	mustTLS := func(ca, cert, key string) *tls.Config {
		c, err := workers.ClientTLSConfig(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name    string
		mutual  bool
		scheme  string
		tls     *tls.Config
		wantErr []string // empty: connects and generates
	}{
		{"server TLS", false, "grpcs://", mustTLS(pki.caFile, "", ""), nil},
		{"mutual TLS", true, "grpcs://", mustTLS(pki.caFile, pki.clientCert, pki.clientKey), nil},
		{"wrong CA", false, "grpcs://", mustTLS(other.caFile, "", ""), []string{"TLS handshake failed", "x509"}},
		{"system roots do not know the test CA", false, "grpcs://", nil, []string{"TLS handshake failed"}},
		{"client certificate from the wrong CA", true, "grpcs://", mustTLS(pki.caFile, other.clientCert, other.clientKey), []string{"grpcs://"}},
		{"plaintext URL to a TLS engine", false, "grpc://", mustTLS(pki.caFile, "", ""), []string{"unreachable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startTLSSim(t, pki, tt.mutual)
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), tt.scheme+srv.Addr(), workers.ConnectOptions{TLS: tt.tls, Timeout: 3 * time.Second})
			if len(tt.wantErr) > 0 {
				if err == nil {
					w.Close()
					t.Fatal("Connect succeeded")
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("code %v, want UNAVAILABLE: %v", status.Code(err), err)
				}
				for _, m := range tt.wantErr {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not mention %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.URL() != "grpcs://"+srv.Addr() {
				t.Errorf("URL %s", w.URL())
			}
			st, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "tls", InputIDs: []uint32{1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			for {
				c, err := st.Recv()
				if err != nil {
					t.Fatalf("stream over TLS: %v", err)
				}
				if c.Final != nil {
					break
				}
			}
		})
	}
}

func TestClientTLSConfigErrors(t *testing.T) {
	pki := newTestPKI(t, "kvgate")
	notPEM := testutil.WriteFile(t, t.TempDir(), "x", []byte("not a certificate"))
	tests := []struct {
		name            string
		ca, cert, key   string
		wantErr         string
		wantRoots, mTLS bool
	}{
		{name: "system roots", wantErr: ""},
		{name: "CA file", ca: pki.caFile, wantRoots: true},
		{name: "mutual", ca: pki.caFile, cert: pki.clientCert, key: pki.clientKey, wantRoots: true, mTLS: true},
		{name: "cert without key", cert: pki.clientCert, wantErr: "both"},
		{name: "key without cert", key: pki.clientKey, wantErr: "both"},
		{name: "missing CA file", ca: filepath.Join(t.TempDir(), "nope.pem"), wantErr: "nope.pem"},
		{name: "CA file without PEM", ca: notPEM, wantErr: "no PEM certificate"},
		{name: "key that does not match", cert: pki.clientCert, key: pki.serverKey, wantErr: "client certificate"},
	}
	for _, tt := range tests {
		cfg, err := workers.ClientTLSConfig(tt.ca, tt.cert, tt.key)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if (cfg.RootCAs != nil) != tt.wantRoots || (len(cfg.Certificates) == 1) != tt.mTLS {
			t.Errorf("%s: RootCAs set %v, %d certificates", tt.name, cfg.RootCAs != nil, len(cfg.Certificates))
		}
	}
}
