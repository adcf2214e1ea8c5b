package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/internal/tlsfiles"
	"github.com/kvgate/kvgate/openai"
	"github.com/kvgate/kvgate/router"
)

// httpFlags configure the OpenAI-compatible HTTP front.
type httpFlags struct {
	port int
	host string
}

func (f *httpFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.port, "http-port", -1, "serve the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models) and SGLang's /generate on this port, through the same pipeline as gRPC (-1: off; 0: any free port)")
	fs.StringVar(&f.host, "http-host", "", "with --http-port: the address to serve HTTP on (empty: --host)")
}

// httpFront is the running HTTP front: an http.Server whose handler
// translates into kvgate.v1 calls made over an in-memory listener that
// the router's gRPC server also serves.
type httpFront struct {
	flags    httpFlags
	lis      *openai.Listener
	adminLis *openai.Listener // when Admin is served apart (--admin-port)
	handler  *openai.Handler
	srv      *http.Server
	addr     string
	maxBytes int64
	// readBody bounds a request body's arrival (--request-read-timeout),
	// and writeEach each write of its answer (--stream-send-timeout).
	readBody, writeEach time.Duration
	log                 *slog.Logger
}

// newHTTPFront prepares the front; nil when --http-port is -1. It must be
// made before the router, whose credentials it wraps.
func newHTTPFront(f httpFlags, a admissionFlags, separateAdmin bool, log *slog.Logger) *httpFront {
	if f.port < 0 {
		return nil
	}
	h := &httpFront{flags: f, lis: openai.NewListener(), maxBytes: int64(a.maxRequestBytes), readBody: a.readTimeout,
		writeEach: a.sendTimeout, log: log}
	if separateAdmin {
		h.adminLis = openai.NewListener()
	}
	return h
}

// credentials lets the in-memory connections past the gRPC server's TLS
// (the HTTP front does TLS with the real client).
func (h *httpFront) credentials(c credentials.TransportCredentials) credentials.TransportCredentials {
	if h == nil {
		return c
	}
	return openai.Credentials(c)
}

// start serves the in-memory listener with the router's gRPC server and
// the HTTP front on its port, with the router's TLS files when it has
// them (and mutual TLS when they require client certificates).
func (h *httpFront) start(host string, g *router.Router, certs *tlsfiles.Certificates, serveErr chan<- error) error {
	if h == nil {
		return nil
	}
	if h.flags.host != "" {
		host = h.flags.host
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(h.flags.port)))
	if err != nil {
		return fmt.Errorf("listen for HTTP: %w", err)
	}
	h.addr = lis.Addr().String()
	h.handler = openai.New(openai.Config{Listener: h.lis, AdminListener: h.adminLis, MaxBodyBytes: h.maxBytes,
		BodyReadTimeout: h.readBody, WriteTimeout: h.writeEach, Logger: h.log})
	h.srv = &http.Server{Handler: h.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn)}
	if certs != nil {
		base := certs.TLSConfig()
		h.srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := base.GetConfigForClient(hi)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.NextProtos = []string{"h2", "http/1.1"}
			return c, nil
		}}
	}
	go func() { serveErr <- g.Serve(h.lis) }()
	if h.adminLis != nil {
		go func() { serveErr <- g.ServeAdmin(h.adminLis) }()
	}
	go func() {
		serve := func() error { return h.srv.Serve(lis) }
		if certs != nil {
			serve = func() error { return h.srv.ServeTLS(lis, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("HTTP: %w", err)
		}
	}()
	return nil
}

// shutdown stops taking HTTP requests and waits, until ctx ends, for those
// running; the gRPC server's own shutdown ends their calls.
func (h *httpFront) shutdown(ctx context.Context) {
	if h == nil || h.srv == nil {
		return
	}
	_ = h.srv.Shutdown(ctx)
	h.handler.Close()
}

// address is where HTTP is served; empty when off.
func (h *httpFront) address() string {
	if h == nil {
		return ""
	}
	return h.addr
}
