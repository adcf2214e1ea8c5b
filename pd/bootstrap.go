package pd

import (
	"net"
	"sync"

	"github.com/kvgate/kvgate/workers"
)

// DefaultBootstrapPort is SGLang's default disaggregation bootstrap port,
// used for a prefill engine that reports none and has no override.
const DefaultBootstrapPort = 8998

// BootstrapPorts are the bootstrap ports of prefill engines, by URL
// (grpc://host:port, as ParsePrefillURL returns it), overriding the port an
// engine reports. One table serves every model's Dispatcher, so a port set
// when a worker joins reaches the dispatchers of models added later without
// copying. The zero value is empty and ready; it is safe for concurrent use.
type BootstrapPorts struct {
	mu    sync.Mutex
	byURL map[string]int
}

// NewBootstrapPorts returns a table holding ports (which it copies).
func NewBootstrapPorts(ports map[string]int) *BootstrapPorts {
	b := &BootstrapPorts{}
	for u, p := range ports {
		b.Set(u, p)
	}
	return b
}

// Set records the bootstrap port of the prefill engine at url; 0 forgets it,
// so that the engine's reported port is used.
func (b *BootstrapPorts) Set(url string, port int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if port == 0 {
		delete(b.byURL, url)
		return
	}
	if b.byURL == nil {
		b.byURL = make(map[string]int)
	}
	b.byURL[url] = port
}

// Port is the override for url, 0 when there is none. A nil table has none.
func (b *BootstrapPorts) Port(url string) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byURL[url]
}

// handoff is where the decode engine finds the prefill engine's cache: the
// prefill worker's host, and its bootstrap port (the override, else the
// port the engine reported, else DefaultBootstrapPort). A data-parallel
// rank target (url@rank) shares its engine's bootstrap server, so the
// override is looked up by the engine's address.
func (b *BootstrapPorts) handoff(prefill *workers.Worker, room int32) workers.Handoff {
	h := workers.Handoff{Room: room, BootstrapPort: b.Port(prefill.Endpoint())}
	if _, target, err := workers.ParseAddress(prefill.URL()); err == nil {
		h.BootstrapHost, _, _ = net.SplitHostPort(target)
	}
	if h.BootstrapPort == 0 {
		h.BootstrapPort = prefill.Info().BootstrapPort
	}
	if h.BootstrapPort == 0 {
		h.BootstrapPort = DefaultBootstrapPort
	}
	return h
}
