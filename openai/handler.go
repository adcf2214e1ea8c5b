// Package openai serves OpenAI's HTTP API (chat and text completions,
// embeddings, models) and SGLang's native /generate in front of kvgate's
// own gRPC API. It is a thin front: each HTTP request becomes one call of
// the public kvgate.v1 services, made in-process over an in-memory
// connection to the router's own gRPC server (see Listener), so API keys,
// request ids, trace context, validation, admission, rate limits, routing,
// retries, metrics and tracing are the gRPC path's, not a copy of them.
package openai

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// Config configures the front.
type Config struct {
	// Listener is the in-memory listener the router's gRPC server also
	// serves; the front dials it.
	Listener *Listener
	// AdminListener, when the router serves Admin on a gRPC server of its
	// own (--admin-port), is an in-memory listener that server also
	// serves; /v1/models calls Admin.ListModels there. nil: Admin is
	// served beside Router, on Listener.
	AdminListener *Listener
	// MaxBodyBytes bounds a request body; larger ones are refused with
	// 413 before they are read whole. 0: 8 MiB.
	MaxBodyBytes int64
	// MaxClients bounds the in-memory connections (one per client host);
	// 0: DefaultMaxClients.
	MaxClients int
	// BodyReadTimeout bounds how long a request's body may take to arrive
	// once its headers have (the router's --request-read-timeout); past
	// it the request is answered 408. 0: no bound.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write of a response to its client (the
	// router's --stream-send-timeout): a client that stops reading fails
	// the write, and the handler's return ends the router's call and its
	// engine request (see boundWriter). 0: no bound.
	WriteTimeout time.Duration
	// Logger receives the front's own errors; nil: slog.Default().
	Logger *slog.Logger
}

// Handler is the front's http.Handler.
type Handler struct {
	mux   *http.ServeMux
	conns *conns
	admin *conns // Admin's server, when it is apart; else conns
	max   int64
	// readBody bounds the body's arrival (Config.BodyReadTimeout).
	readBody time.Duration
	// writeEach bounds each write of a response (Config.WriteTimeout).
	writeEach time.Duration
	log       *slog.Logger
	now       func() time.Time
}

// New returns the front. Close it after the HTTP server has stopped.
func New(cfg Config) *Handler {
	h := &Handler{conns: newConns(cfg.Listener, cfg.MaxClients), max: cfg.MaxBodyBytes, readBody: cfg.BodyReadTimeout,
		writeEach: cfg.WriteTimeout, log: cfg.Logger, now: time.Now}
	h.admin = h.conns
	if cfg.AdminListener != nil {
		h.admin = newConns(cfg.AdminListener, cfg.MaxClients)
	}
	if h.max <= 0 {
		h.max = 8 << 20
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", h.chat)
	mux.HandleFunc("POST /v1/completions", h.completions)
	mux.HandleFunc("POST /v1/embeddings", h.embeddings)
	mux.HandleFunc("GET /v1/models", h.models)
	mux.HandleFunc("GET /v1/models/{model...}", h.model)
	mux.HandleFunc("POST /generate", h.generate)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, kind: "invalid_request_error", code: "unknown_url",
			message: r.Method + " " + r.URL.Path + " is not served: kvgate serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, /generate and GET /v1/models"})
	})
	h.mux = mux
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if bw := newBoundWriter(w, h.writeEach); bw != nil {
		// The server's own last writes (the rest of its buffer, the
		// chunked body's end) follow the handler's return.
		defer bw.last()
		w = bw
	}
	h.mux.ServeHTTP(w, r)
}

// Close closes the in-memory connections.
func (h *Handler) Close() {
	h.conns.close()
	h.admin.close()
}

// forwarded are the HTTP headers that become gRPC metadata of the same
// name: API keys, request ids, trace context, and the routing headers in
// kvgate's and SMG's spellings (with the headers the router reads as a
// session's implicit key).
var forwarded = []string{
	"authorization", "x-request-id", "traceparent", "tracestate", "baggage",
	"x-routing-key", "x-smg-routing-key", "x-target-worker", "x-smg-target-worker",
	"x-forwarded-for", "cookie", "kvgate-priority",
}

// client returns the in-memory connection to the Router service for r's
// client and a context carrying r's forwarded headers as outgoing metadata.
func (h *Handler) client(r *http.Request) (context.Context, *grpc.ClientConn, func(), error) {
	return h.clientOf(h.conns, r)
}

// clientOf is client on the connections of pool.
func (h *Handler) clientOf(pool *conns, r *http.Request) (context.Context, *grpc.ClientConn, func(), error) {
	md := metadata.MD{}
	for _, k := range forwarded {
		for _, v := range r.Header.Values(k) {
			if !printable(v) {
				return nil, nil, nil, invalidParam(k, "the %s header must be printable ASCII", k)
			}
			md.Append(k, v)
		}
	}
	cc, release, err := pool.get(r.RemoteAddr)
	if err != nil {
		return nil, nil, nil, err
	}
	return metadata.NewOutgoingContext(r.Context(), md), cc, release, nil
}

// printable reports whether v can be sent as gRPC metadata.
func printable(v string) bool {
	for _, c := range v {
		if c > unicode.MaxASCII || (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// router and admin return the kvgate.v1 clients on cc.
func router(cc *grpc.ClientConn) kvgatev1.RouterClient { return kvgatev1.NewRouterClient(cc) }
func admin(cc *grpc.ClientConn) kvgatev1.AdminClient   { return kvgatev1.NewAdminClient(cc) }

// setRequestID echoes the request's id as the X-Request-Id response
// header: the client's, or the one the router made.
func setRequestID(w http.ResponseWriter, r *http.Request, id string) {
	if v := r.Header.Get("x-request-id"); v != "" {
		id = v
	}
	if id != "" {
		w.Header().Set("X-Request-Id", id)
	}
}

// answer is one message of a Generate or Chat stream.
type answer interface {
	GetRequestId() string
	GetChunk() *kvgatev1.GenerateChunk
	GetComplete() *kvgatev1.GenerateComplete
}

// recvFunc receives the next message of a stream.
type recvFunc func() (answer, error)

// events turns a stream's messages into the endpoint's server-sent events
// (each value is sent as one `data:` line of JSON).
type events interface {
	chunk(id string, c *kvgatev1.GenerateChunk) []any
	complete(id string, c *kvgatev1.GenerateComplete) []any
}

// relay sends a streamed call to w as server-sent events, ending with
// `data: [DONE]`. The first message is awaited before the status is
// written, so a call refused at once gets its HTTP status; an error after
// that arrives as an event holding OpenAI's error JSON. When the client
// goes away, r's context ends the gRPC call, and with it the engine's
// request.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, recv recvFunc, ev events) {
	m, err := recv()
	if err != nil {
		writeError(w, err)
		return
	}
	id := m.GetRequestId()
	setRequestID(w, r, id)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	sse := &sseWriter{w: w}
	for {
		var out []any
		if c := m.GetChunk(); c != nil {
			out = ev.chunk(id, c)
		} else if c := m.GetComplete(); c != nil {
			out = ev.complete(id, c)
		}
		for _, v := range out {
			sse.data(v)
		}
		if m.GetComplete() != nil {
			sse.done()
			_ = rc.Flush()
			return
		}
		if sse.err == nil {
			sse.err = rc.Flush()
		}
		if sse.err != nil {
			return // the client is gone; returning cancels the call
		}
		if m, err = recv(); err != nil {
			if r.Context().Err() == nil {
				sse.data(fromStatus(err).body())
				_ = rc.Flush()
			}
			return
		}
	}
}

// final waits for a call's completion (stream=false).
func final(recv recvFunc) (answer, *kvgatev1.GenerateComplete, error) {
	for {
		m, err := recv()
		if err != nil {
			return nil, nil, err
		}
		if c := m.GetComplete(); c != nil {
			return m, c, nil
		}
	}
}

// model is the name the response reports: the request's, else the
// router's only model as the call's caller named none.
func modelName(m string) string {
	if strings.TrimSpace(m) == "" {
		return "default"
	}
	return m
}

// prepare takes the steps every endpoint takes before its call: r's body
// read into req (within the size limit), translated by proto into its
// kvgate.v1 request, and r's client's in-process connection opened. On
// failure it has answered w and ok is false; otherwise release must be
// called when the call is over.
func prepare[Q, P any](h *Handler, w http.ResponseWriter, r *http.Request, req *Q, proto func(*Q) (P, error)) (
	ctx context.Context, rc kvgatev1.RouterClient, p P, release func(), ok bool) {
	if err := decodeBody(w, r, h.max, h.readBody, req); err != nil {
		writeError(w, err)
		return nil, nil, p, nil, false
	}
	p, err := proto(req)
	if err != nil {
		writeError(w, err)
		return nil, nil, p, nil, false
	}
	var priority string
	if pr, ok := any(req).(interface{ priorityMetadata() (string, error) }); ok {
		if priority, err = pr.priorityMetadata(); err != nil {
			writeError(w, err)
			return nil, nil, p, nil, false
		}
	}
	ctx, cc, release, err := h.client(r)
	if err != nil {
		writeError(w, err)
		return nil, nil, p, nil, false
	}
	if priority != "" { // the body's field over the header
		md, _ := metadata.FromOutgoingContext(ctx)
		md.Set("kvgate-priority", priority)
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return ctx, router(cc), p, release, true
}
