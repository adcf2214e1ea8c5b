package workers

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// Protocol is the gRPC protocol an engine speaks.
type Protocol int

const (
	ProtocolUnknown Protocol = iota
	ProtocolSGLang
	ProtocolVLLM
)

func (p Protocol) String() string {
	switch p {
	case ProtocolSGLang:
		return "sglang"
	case ProtocolVLLM:
		return "vllm"
	}
	return "unknown"
}

// ParseProtocol reads a protocol name as given on the command line. The empty
// string and "auto" mean "detect by asking the engine".
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return ProtocolUnknown, nil
	case "sglang":
		return ProtocolSGLang, nil
	case "vllm":
		return ProtocolVLLM, nil
	}
	return ProtocolUnknown, fmt.Errorf("unknown worker protocol %q (want sglang, vllm or auto)", s)
}

// Role is the part a worker plays in serving.
type Role int

const (
	RoleRegular Role = iota
	RolePrefill
	RoleDecode
)

func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "regular"
}

// ParseAddress accepts grpc://host:port or a bare host:port and returns the
// canonical URL (grpc://host:port) and the dial target (host:port). http://
// is read as grpc:// (plaintext), so that the seeds' examples, written for
// HTTP workers, run unchanged; TLS (https://, grpcs://) is not supported yet.
func ParseAddress(s string) (url, target string, err error) {
	s = strings.TrimSpace(s)
	rest, found := strings.CutPrefix(s, "grpc://")
	if !found {
		rest, found = strings.CutPrefix(s, "http://")
	}
	if !found && strings.Contains(s, "://") {
		return "", "", fmt.Errorf("worker address %q: only plaintext grpc:// (or http://) URLs and host:port are supported", s)
	}
	rest = strings.TrimSuffix(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil || port == "" {
		return "", "", fmt.Errorf("worker address %q: want grpc://host:port or host:port", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	target = net.JoinHostPort(host, port)
	return "grpc://" + target, target, nil
}

// Worker is one engine as the router sees it. Its identity (URL, protocol,
// role, model) is fixed when it is registered; health and load change and are
// safe to read from any goroutine.
type Worker struct {
	url      string
	protocol Protocol
	role     Role
	info     ModelInfo
	backend  Backend
	closer   func() error

	healthy  atomic.Bool
	inFlight atomic.Int64

	mu         sync.Mutex
	engineLoad Load
	// inFlightAtPoll is our in-flight count when engineLoad was read, so that
	// requests the engine has from other clients can be told apart from ours.
	inFlightAtPoll int
}

// NewWorker assembles a worker from an already connected backend. It starts
// healthy. closer, when not nil, is called by Close (it closes the connection).
func NewWorker(url string, protocol Protocol, role Role, info ModelInfo, b Backend, closer func() error) *Worker {
	w := &Worker{url: url, protocol: protocol, role: role, info: info, backend: b, closer: closer}
	w.healthy.Store(true)
	return w
}

func (w *Worker) URL() string        { return w.url }
func (w *Worker) Protocol() Protocol { return w.protocol }
func (w *Worker) Role() Role         { return w.role }
func (w *Worker) Info() ModelInfo    { return w.info }
func (w *Worker) Backend() Backend   { return w.backend }
func (w *Worker) Healthy() bool      { return w.healthy.Load() }
func (w *Worker) SetHealthy(h bool)  { w.healthy.Store(h) }
func (w *Worker) InFlight() int      { return int(w.inFlight.Load()) }
func (w *Worker) String() string     { return w.url }

// Acquire counts one request in flight on the worker until release is called.
// release is idempotent.
func (w *Worker) Acquire() (release func()) {
	w.inFlight.Add(1)
	var once sync.Once
	return func() { once.Do(func() { w.inFlight.Add(-1) }) }
}

// SetEngineLoad records the engine's own load figures from a poll.
func (w *Worker) SetEngineLoad(l Load) {
	w.mu.Lock()
	w.engineLoad = l
	w.inFlightAtPoll = w.InFlight()
	w.mu.Unlock()
}

// EngineLoad is the engine's load as last polled.
func (w *Worker) EngineLoad() Load {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.engineLoad
}

// Load is the number policies compare: requests this router has in flight on
// the worker, plus the requests the engine reported (running and waiting) that
// were not ours at the time of the poll, such as another router's. Counting our
// own live figure first keeps the number exact between polls; adding the
// engine's surplus keeps a worker shared with other clients from looking idle.
func (w *Worker) Load() int {
	w.mu.Lock()
	external := w.engineLoad.Running + w.engineLoad.Waiting - w.inFlightAtPoll
	w.mu.Unlock()
	if external < 0 {
		external = 0
	}
	return w.InFlight() + external
}

// Close releases the worker's connection.
func (w *Worker) Close() error {
	if w.closer == nil {
		return nil
	}
	return w.closer()
}

// Registry holds the workers the router knows, in registration order.
type Registry struct {
	mu      sync.RWMutex
	workers []*Worker
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Add registers w. A worker whose URL is already registered is refused.
func (r *Registry) Add(w *Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.workers {
		if x.url == w.url {
			return fmt.Errorf("worker %s is already registered", w.url)
		}
	}
	r.workers = append(r.workers, w)
	return nil
}

// Snapshot returns the registered workers. The slice is the caller's own; the
// workers in it are shared and their health and load keep changing.
func (r *Registry) Snapshot() []*Worker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Worker, len(r.workers))
	copy(out, r.workers)
	return out
}

// WithRole returns the registered workers of one role, in registration
// order, healthy or not.
func (r *Registry) WithRole(role Role) []*Worker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Worker
	for _, w := range r.workers {
		if w.role == role {
			out = append(out, w)
		}
	}
	return out
}

// Get returns the worker with the given URL (grpc://host:port or host:port).
func (r *Registry) Get(addr string) (*Worker, bool) {
	url, _, err := ParseAddress(addr)
	if err != nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, w := range r.workers {
		if w.url == url {
			return w, true
		}
	}
	return nil, false
}

// Close closes every worker's connection.
func (r *Registry) Close() error {
	var first error
	for _, w := range r.Snapshot() {
		if err := w.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
