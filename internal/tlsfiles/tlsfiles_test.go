package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
)

// leaksKey reports whether s contains part of the base64 body of keyPEM.
func leaksKey(s string, keyPEM []byte) bool {
	body := strings.Join(strings.Split(string(keyPEM), "\n")[1:3], "")
	return strings.Contains(s, body[10:40])
}

// writeFile replaces name the way rotation tools do: write aside, then rename.
func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// fixture is a directory of TLS files and a real gRPC server with the
// standard health service serving them.
type fixture struct {
	cfg   Config
	certs *Certificates
	addr  string
}

func newFixture(t *testing.T, ca *testutil.CA, clientCA []byte, logger *slog.Logger) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{cfg: Config{
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
		Logger:   logger,
	}}
	cert, key := ca.Issue(t, 100, true)
	writeFile(t, f.cfg.CertFile, cert)
	writeFile(t, f.cfg.KeyFile, key)
	if clientCA != nil {
		f.cfg.ClientCAFile = filepath.Join(dir, "client-ca.crt")
		writeFile(t, f.cfg.ClientCAFile, clientCA)
	}
	var err error
	if f.certs, err = New(f.cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// start serves gRPC health over loopback with the fixture's TLS config.
func (f *fixture) start(t *testing.T) {
	t.Helper()
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(f.certs.TLSConfig())))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	f.addr = lis.Addr().String()
}

// check makes one health call over a new connection (so a new handshake)
// and returns the serial of the certificate the server presented.
func (f *fixture) check(t *testing.T, roots *x509.CertPool, clientCert *tls.Certificate) (int64, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return 0, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer auth info is %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64(), nil
}

func (f *fixture) wantSerial(t *testing.T, roots *x509.CertPool, want int64) {
	t.Helper()
	got, err := f.check(t, roots, nil)
	if err != nil {
		t.Fatalf("health check over TLS: %v", err)
	}
	if got != want {
		t.Fatalf("server certificate serial %d, want %d", got, want)
	}
}

func TestReloadRotatesAndKeepsGoodCertificate(t *testing.T) {
	ca := testutil.NewCA(t, "kvgate test CA")
	f := newFixture(t, ca, nil, nil)
	f.start(t)
	f.wantSerial(t, ca.Pool(), 100)

	cert, key := ca.Issue(t, 200, true)
	writeFile(t, f.cfg.KeyFile, key)
	writeFile(t, f.cfg.CertFile, cert)
	if err := f.certs.Reload(); err != nil {
		t.Fatalf("Reload after a good rotation: %v", err)
	}
	f.wantSerial(t, ca.Pool(), 200)

	otherCert, _ := ca.Issue(t, 300, true)
	broken := []struct {
		name      string
		cert, key []byte
	}{
		{"key does not match certificate", otherCert, key},
		{"certificate half written", cert[:len(cert)/2], key},
		{"key half written", cert, key[:len(key)/2]},
		{"key empty", cert, nil},
		{"certificate is not PEM", []byte("not a certificate\n"), key},
	}
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			writeFile(t, f.cfg.CertFile, b.cert)
			writeFile(t, f.cfg.KeyFile, b.key)
			err := f.certs.Reload()
			if err == nil {
				t.Fatal("Reload accepted broken files")
			}
			if leaksKey(err.Error(), key) {
				t.Errorf("Reload error shows key material: %v", err)
			}
			f.wantSerial(t, ca.Pool(), 200)
		})
	}
}

// syncBuffer is a log destination safe for the server's handshake goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestHandshakesReloadChangedFiles(t *testing.T) {
	ca := testutil.NewCA(t, "kvgate test CA")
	var logs syncBuffer
	f := newFixture(t, ca, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	// A clock the test moves, so "at most once per interval" is checked
	// without sleeping or timing anything.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	f.certs.now = func() time.Time { return time.Unix(0, clock.Load()) }
	f.certs.lastCheck.Store(clock.Load())
	f.start(t)
	f.wantSerial(t, ca.Pool(), 100)

	cert, key := ca.Issue(t, 200, true)
	writeFile(t, f.cfg.KeyFile, key)
	writeFile(t, f.cfg.CertFile, cert)
	f.wantSerial(t, ca.Pool(), 100) // within the interval: files not looked at
	clock.Add(int64(2 * checkInterval))
	f.wantSerial(t, ca.Pool(), 200)

	otherCert, _ := ca.Issue(t, 300, true)
	writeFile(t, f.cfg.CertFile, otherCert) // does not match the key
	for range 2 {
		clock.Add(int64(2 * checkInterval))
		f.wantSerial(t, ca.Pool(), 200)
	}
	out := logs.String()
	if n := strings.Count(out, "do not load"); n != 1 {
		t.Errorf("broken rotation logged %d times, want once:\n%s", n, out)
	}
	if leaksKey(out, key) {
		t.Errorf("log shows key material:\n%s", out)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := testutil.NewCA(t, "kvgate test CA")
	clientCA := testutil.NewCA(t, "kvgate client CA")
	strangerCA := testutil.NewCA(t, "unrelated CA")
	f := newFixture(t, ca, clientCA.PEM, nil)
	f.start(t)

	pair := func(c *testutil.CA, serial int64) *tls.Certificate {
		cert, key := c.Issue(t, serial, false)
		p, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	good, stranger := pair(clientCA, 10), pair(strangerCA, 11)
	tests := []struct {
		name   string
		cert   *tls.Certificate
		served bool
	}{
		{"no client certificate", nil, false},
		{"certificate from an unrelated CA", stranger, false},
		{"certificate from the client CA", good, true},
	}
	run := func(t *testing.T, cert *tls.Certificate, served bool) {
		t.Helper()
		_, err := f.check(t, ca.Pool(), cert)
		switch {
		case served && err != nil:
			t.Fatalf("refused: %v", err)
		case !served && status.Code(err) != codes.Unavailable:
			t.Fatalf("got %v, want the connection refused (Unavailable)", err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.cert, tt.served) })
	}

	// The client CA file is reloaded too: trusting the other CA instead
	// admits its clients and locks out the first CA's.
	writeFile(t, f.cfg.ClientCAFile, strangerCA.PEM)
	if err := f.certs.Reload(); err != nil {
		t.Fatal(err)
	}
	t.Run("after CA rotation: new CA served", func(t *testing.T) { run(t, stranger, true) })
	t.Run("after CA rotation: old CA refused", func(t *testing.T) { run(t, good, false) })
}

func TestNewRefusesBadFiles(t *testing.T) {
	ca := testutil.NewCA(t, "kvgate test CA")
	cert, key := ca.Issue(t, 100, true)
	otherCert, _ := ca.Issue(t, 101, true)
	tests := []struct {
		name           string
		cert, key, cas []byte // nil cas: no client CA file
		noCert         bool   // CertFile left empty
	}{
		{name: "no certificate file named", noCert: true},
		{name: "key does not match", cert: otherCert, key: key},
		{name: "client CA file empty", cert: cert, key: key, cas: []byte{}},
		{name: "client CA file half written", cert: cert, key: key, cas: ca.PEM[:len(ca.PEM)-30]},
		{name: "client CA file holds a key", cert: cert, key: key, cas: key},
		{name: "client CA file too large", cert: cert, key: key, cas: bytes.Repeat([]byte("#"), maxFileSize+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{CertFile: filepath.Join(dir, "c"), KeyFile: filepath.Join(dir, "k")}
			writeFile(t, cfg.CertFile, tt.cert)
			writeFile(t, cfg.KeyFile, tt.key)
			if tt.noCert {
				cfg.CertFile = ""
			}
			if tt.cas != nil {
				cfg.ClientCAFile = filepath.Join(dir, "ca")
				writeFile(t, cfg.ClientCAFile, tt.cas)
			}
			_, err := New(cfg)
			if err == nil {
				t.Fatal("New accepted bad files")
			}
			if leaksKey(err.Error(), key) {
				t.Errorf("error shows key material: %v", err)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		dir := t.TempDir()
		_, err := New(Config{CertFile: filepath.Join(dir, "c"), KeyFile: filepath.Join(dir, "k")})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("New with missing files: %v, want a wrapped not-exist error", err)
		}
	})
}
