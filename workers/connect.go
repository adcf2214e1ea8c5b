package workers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// DefaultConnectTimeout bounds protocol detection and the model-information
// calls Connect makes when ConnectOptions.Timeout is zero.
const DefaultConnectTimeout = 5 * time.Second

// ConnectOptions says how to reach one worker.
type ConnectOptions struct {
	// Protocol is the engine's protocol; ProtocolUnknown asks the engine.
	Protocol Protocol
	Role     Role
	// TLS configures the client side of TLS for grpcs:// workers: the CA
	// pool that verifies the engine (nil RootCAs: the system roots) and, for
	// mutual TLS, the client certificate (see ClientTLSConfig). nil means
	// the system roots and no client certificate. Plaintext URLs ignore it.
	TLS *tls.Config
	// DialOptions are added to the transport credentials Connect chooses
	// from the URL (plaintext for grpc://, TLS for grpcs://); to replace
	// those, pass grpc.WithTransportCredentials here.
	DialOptions []grpc.DialOption
	// Timeout bounds detection and the information calls; 0 means
	// DefaultConnectTimeout.
	Timeout time.Duration
	// Breaker configures the worker's circuit breaker; nil means
	// DefaultBreakerConfig.
	Breaker *BreakerConfig
	// Propagator, when set, writes the caller's trace context into the
	// metadata of every call to the worker (W3C traceparent); nil: calls
	// carry none, and cost nothing extra.
	Propagator Propagator
	// Admit, when set, is asked before a connected worker enters a
	// registry through Join or JoinResult, and before a placeholder's
	// worker replaces it: an error keeps the worker out (it should wrap
	// ErrIncompatible). The router uses it to refuse an engine whose model
	// does not fit the fleet. Connect itself ignores it.
	Admit func(*Worker) error
	// MaxAnswerBytes is the largest Generate message accepted from the
	// engine; 0 means DefaultMaxAnswerBytes, which holds every answer a
	// request the router admits can produce (see AnswerBytes). Every other
	// call keeps DefaultMaxMessageBytes.
	MaxAnswerBytes int
	// DPAware makes ConnectAll (and Join) register an engine with more than
	// one data-parallel rank as one worker per rank (see dprank.go);
	// Connect itself always returns the whole engine.
	DPAware bool
}

// Connect dials the engine at addr (grpc://host:port or host:port), detects its
// protocol unless opts names one, reads its model information and returns a
// healthy Worker that owns the connection (Worker.Close closes it). Every error
// names the address; an engine that cannot be reached yields an error whose
// gRPC code is UNAVAILABLE.
func Connect(ctx context.Context, addr string, opts ConnectOptions) (*Worker, error) {
	a, err := ParseWorkerAddress(addr)
	if err != nil {
		return nil, err
	}
	if opts.Breaker != nil {
		if err := opts.Breaker.Validate(); err != nil {
			return nil, fmt.Errorf("worker %s: %w", a.URL, err)
		}
	}
	url, target := a.URL, a.Target
	creds := insecure.NewCredentials()
	if a.TLS {
		cfg := opts.TLS
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	maxAnswer := opts.MaxAnswerBytes
	if maxAnswer <= 0 {
		maxAnswer = DefaultMaxAnswerBytes
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxAnswer))}, smallAnswers()...)
	dial = append(dial, opts.DialOptions...)
	if opts.Propagator != nil {
		dial = append(dial, traceInterceptors(opts.Propagator, url)...)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}

	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", url, err)
	}
	w, err := connect(ctx, conn, url, opts.Protocol, opts.Role, timeout)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	w.reconnects = watchReconnects(conn)
	if opts.Breaker != nil {
		if err := w.Breaker().Reconfigure(*opts.Breaker); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("worker %s: %w", url, err)
		}
	}
	return w, nil
}

func connect(ctx context.Context, conn *grpc.ClientConn, url string, proto Protocol, role Role, timeout time.Duration) (*Worker, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if proto == ProtocolUnknown {
		p, err := Detect(ctx, conn)
		if err != nil {
			return nil, connectError(url, "detecting its protocol", err)
		}
		proto = p
	}
	b, err := NewBackend(proto, conn)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", url, err)
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, connectError(url, "reading "+proto.String()+" model information", err)
	}
	return NewWorker(url, proto, role, info, b, conn.Close), nil
}

// DefaultMaxMessageBytes is the receive limit of every engine call but
// Generate: grpc's default, 4 MiB. Only a Generate answer grows with the
// request (log-probabilities); model information, loads, health, an
// embedding, a tokenizer chunk or a KV event batch has no reason to be
// larger, and an engine must not make the router hold more.
const DefaultMaxMessageBytes = 4 << 20

// smallAnswers keeps DefaultMaxMessageBytes on every engine call except the
// Generate stream, which keeps the connection's larger limit.
func smallAnswers() []grpc.DialOption {
	small := grpc.MaxCallRecvMsgSize(DefaultMaxMessageBytes)
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(ctx, method, req, reply, cc, append(opts, small)...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if !strings.HasSuffix(method, "/Generate") {
				opts = append(opts, small)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// NewBackend returns the adapter for protocol p over conn.
func NewBackend(p Protocol, conn grpc.ClientConnInterface) (Backend, error) {
	switch p {
	case ProtocolSGLang:
		return NewSGLangBackend(conn), nil
	case ProtocolVLLM:
		return NewVLLMBackend(conn), nil
	case ProtocolTRTLLM:
		return NewTRTLLMBackend(conn), nil
	}
	return nil, fmt.Errorf("no adapter for protocol %s", p)
}

// ErrUnknownEngine is Detect's answer for a server that implements none of
// the engine protocols.
var ErrUnknownEngine = errors.New("the server speaks none of sglang.grpc.scheduler.SglangScheduler, vllm.grpc.engine.VllmEngine and trtllm.TrtllmService")

// Detect asks the engine behind conn which protocol it speaks, by calling each
// protocol's GetModelInfo in turn (SGLang, vLLM, then TensorRT-LLM): a gRPC server answers
// UNIMPLEMENTED for a service it does not have, so a success identifies the
// protocol and UNIMPLEMENTED moves on to the next. Any other error (the engine
// is unreachable, or too slow for ctx) is returned, since it says nothing about
// the protocol. A server with none of the services yields ErrUnknownEngine.
func Detect(ctx context.Context, conn grpc.ClientConnInterface) (Protocol, error) {
	_, err := sglang.NewSglangSchedulerClient(conn).GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	if err == nil {
		return ProtocolSGLang, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return ProtocolUnknown, err
	}
	_, err = vllm.NewVllmEngineClient(conn).GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err == nil {
		return ProtocolVLLM, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return ProtocolUnknown, err
	}
	_, err = trtllm.NewTrtllmServiceClient(conn).GetModelInfo(ctx, &trtllm.GetModelInfoRequest{})
	if err == nil {
		return ProtocolTRTLLM, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return ProtocolUnknown, err
	}
	return ProtocolUnknown, ErrUnknownEngine
}

// connectError names the worker and what Connect was doing, and says in plain
// words what the transport errors people meet most often mean, keeping the
// gRPC status (and so status.Code) of err.
func connectError(url, doing string, err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		if tlsFailure(err) {
			return fmt.Errorf("worker %s: TLS handshake failed (%s; check the CA, the server name and the client certificate): %w", url, doing, err)
		}
		return fmt.Errorf("worker %s unreachable (%s): %w", url, doing, err)
	case codes.DeadlineExceeded:
		return fmt.Errorf("worker %s did not answer in time (%s): %w", url, doing, err)
	}
	return fmt.Errorf("worker %s: %s: %w", url, doing, err)
}

// tlsFailure reports whether a transport error came from the TLS handshake
// (an unknown authority, a name mismatch, a refused client certificate),
// which gRPC reports only in the message of an UNAVAILABLE status.
func tlsFailure(err error) bool {
	msg := status.Convert(err).Message()
	for _, s := range []string{"x509:", "tls:", "authentication handshake failed"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ClientTLSConfig builds the client side of TLS for grpcs:// workers.
// caFile is a PEM bundle of the CAs that sign engine certificates (empty:
// the system roots). certFile and keyFile are the client certificate and key
// for mutual TLS, both or neither.
func ClientTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("worker TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("worker TLS CA %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("worker TLS client certificate: give both the certificate and the key, or neither (got cert %q, key %q)", certFile, keyFile)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("worker TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
