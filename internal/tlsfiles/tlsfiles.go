// Package tlsfiles serves TLS for kvgate's gRPC listener from PEM files that
// may be replaced while kvgate runs.
//
// Certificates are rotated on disk (cert-manager, a Kubernetes secret volume,
// certbot) far more often than a router is restarted, and restarting a router
// drops every in-flight generation. So the *tls.Config returned by
// Certificates.TLSConfig looks at the files again, at most once per second,
// when a client connects, and switches to the new certificate (and client CA
// pool) when their contents have changed. Reload does the same at once, for
// SIGHUP.
//
// A reload that fails (a half-written file, a key that does not match the
// certificate, a CA file with no certificate) keeps serving the previous good
// configuration: a broken rotation must not take the listener down. Reload
// returns the error; the automatic path logs it, once per distinct file
// contents. Nothing here logs or returns key material.
//
// The name says what the package is given (files) rather than one of the
// things it does with them: loading and reloading are the same operation.
package tlsfiles

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// checkInterval bounds how often a handshake looks at the files.
const checkInterval = time.Second

// maxFileSize bounds each file read: real PEM bundles are a few KiB, and a
// wrong path (a log file, a device) must not be read whole at every check.
const maxFileSize = 1 << 20

// Config names the files.
type Config struct {
	// CertFile holds the server certificate, followed by any intermediates,
	// in PEM. Required.
	CertFile string
	// KeyFile holds the private key of the certificate in PEM. Required.
	KeyFile string
	// ClientCAFile holds, in PEM, the CA certificates that sign client
	// certificates. When set, clients must present a certificate that
	// verifies against them (mutual TLS); empty asks for no client
	// certificate.
	ClientCAFile string
	// Logger receives reloads and the errors of automatic reloads. Nil
	// discards them.
	Logger *slog.Logger
}

// Certificates holds the current configuration loaded from the files of a
// Config. It is safe for concurrent use.
type Certificates struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time // a field so tests can move time without sleeping

	current   atomic.Pointer[tls.Config] // what handshakes are served with
	lastCheck atomic.Int64               // unix nanoseconds of the last automatic check

	mu       sync.Mutex        // serializes loads; guards seen and reported
	seen     [sha256.Size]byte // digest of the file contents last loaded or tried
	reported string            // the read error last logged, so a missing file is logged once
}

// New loads the files of cfg and returns Certificates serving them. It fails
// when the files cannot be read or do not form a valid configuration, since a
// listener without a certificate cannot serve.
func New(cfg Config) (*Certificates, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tlsfiles: both a certificate file and a key file are required")
	}
	c := &Certificates{cfg: cfg, logger: cfg.Logger, now: time.Now}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	c.lastCheck.Store(c.now().UnixNano())
	return c, nil
}

// TLSConfig returns the configuration to give the gRPC server, for instance
// through credentials.NewTLS. It requires TLS 1.2 or later and offers "h2",
// which gRPC needs. Each handshake is served with the newest good
// configuration loaded from the files; the returned value itself never
// changes and may be cloned.
func (c *Certificates) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c.maybeReload()
			return c.current.Load(), nil
		},
	}
}

// Reload reads the files now and, when they form a valid configuration,
// serves new connections with it. On error the previous configuration stays
// in use. Connections already established are not affected either way.
func (c *Certificates) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	files, digest, err := c.read()
	if err != nil {
		return err
	}
	c.seen = digest
	return c.install(files)
}

// maybeReload is the automatic path, run by handshakes: at most one handshake
// per checkInterval reads the files, and only changed contents are loaded.
func (c *Certificates) maybeReload() {
	now := c.now().UnixNano()
	last := c.lastCheck.Load()
	if now-last < int64(checkInterval) || !c.lastCheck.CompareAndSwap(last, now) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	files, digest, err := c.read()
	if err != nil {
		if msg := err.Error(); msg != c.reported {
			c.reported = msg
			c.logger.Error("tlsfiles: reading TLS files; keeping the current certificate", "err", err)
		}
		return
	}
	c.reported = ""
	if digest == c.seen {
		return
	}
	c.seen = digest // a broken version is reported once, not at every check
	if err := c.install(files); err != nil {
		c.logger.Error("tlsfiles: TLS files changed but do not load; keeping the current certificate", "err", err)
	}
}

// contents are the bytes of the configured files.
type contents struct{ cert, key, clientCA []byte }

// read reads every file and returns their contents and a digest of them.
// Comparing contents rather than modification times notices every change,
// including a rename-based swap within one timestamp tick, and reading once
// a second a few KiB is cheap.
func (c *Certificates) read() (contents, [sha256.Size]byte, error) {
	var f contents
	var err error
	if f.cert, err = readFile(c.cfg.CertFile); err != nil {
		return f, [sha256.Size]byte{}, err
	}
	if f.key, err = readFile(c.cfg.KeyFile); err != nil {
		return f, [sha256.Size]byte{}, err
	}
	if c.cfg.ClientCAFile != "" {
		if f.clientCA, err = readFile(c.cfg.ClientCAFile); err != nil {
			return f, [sha256.Size]byte{}, err
		}
	}
	h := sha256.New()
	for _, b := range [][]byte{f.cert, f.key, f.clientCA} {
		fmt.Fprintf(h, "%d:", len(b)) // length-prefixed, so moving bytes between files changes the digest
		h.Write(b)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return f, d, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: reading %s: %w", name, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("tlsfiles: %s is larger than %d bytes; not a PEM certificate or key", name, maxFileSize)
	}
	return b, nil
}

// install builds the configuration from files and makes it current.
func (c *Certificates) install(f contents) error {
	if err := checkPEM(c.cfg.CertFile, f.cert); err != nil {
		return err
	}
	// X509KeyPair checks that the key matches the certificate. Its errors
	// describe the PEM structure, never the key bytes.
	pair, err := tls.X509KeyPair(f.cert, f.key)
	if err != nil {
		return fmt.Errorf("tlsfiles: loading %s and %s: %w", c.cfg.CertFile, c.cfg.KeyFile, err)
	}
	next := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{pair},
	}
	if c.cfg.ClientCAFile != "" {
		pool, err := certPool(c.cfg.ClientCAFile, f.clientCA)
		if err != nil {
			return err
		}
		next.ClientCAs = pool
		next.ClientAuth = tls.RequireAndVerifyClientCert
		// A resumed session skips client certificate verification. Without
		// tickets every connection is verified against the pool that is
		// current now, so removing a CA from the file locks its clients out
		// at the next connection. gRPC connections are long-lived, so the
		// extra full handshakes cost little.
		next.SessionTicketsDisabled = true
	}
	c.current.Store(next)
	leaf := pair.Leaf
	if leaf == nil { // nil only under GODEBUG=x509keypairleaf=0
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("tlsfiles: parsing %s: %w", c.cfg.CertFile, err)
		}
	}
	c.logger.Info("tlsfiles: serving certificate",
		"subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter, "client_ca", c.cfg.ClientCAFile != "")
	return nil
}

// certPool parses every certificate in data. Unlike
// x509.CertPool.AppendCertsFromPEM it fails on anything it cannot parse, so a
// half-written CA file is an error rather than a pool silently missing a CA.
func certPool(name string, data []byte) (*x509.CertPool, error) {
	if err := checkPEM(name, data); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("tlsfiles: %s: unexpected PEM block %q, want CERTIFICATE", name, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsfiles: %s: certificate %d: %w", name, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("tlsfiles: %s holds no certificate", name)
	}
	return pool, nil
}

// checkPEM fails when data ends with something that is not a complete PEM
// block: the usual sign of a file read while it was being written, which
// the standard parsers would otherwise ignore.
func checkPEM(name string, data []byte) error {
	rest := data
	for {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return fmt.Errorf("tlsfiles: %s ends with data that is not a complete PEM block (file partly written?)", name)
	}
	return nil
}
