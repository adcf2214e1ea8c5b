package server

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrWorkerNotAllowed is wrapped by a Fleet's AddWorker when the address is
// not one the operator allows (--admin-worker-allow): the call is answered
// FAILED_PRECONDITION, and the router dials nothing.
var ErrWorkerNotAllowed = errors.New("worker address not allowed")

// ErrTooManyWorkers is wrapped by a Fleet's AddWorker when the fleet already
// has as many engines as it may (--max-workers): RESOURCE_EXHAUSTED.
var ErrTooManyWorkers = errors.New("too many workers")

// WorkerAllow is the set of hosts Admin.AddWorker may connect to. Without
// it, any caller of Admin could make the router dial any host:port it
// names (a scanner inside the network the router sits in). A host is
// allowed when it matches one pattern:
//
//   - an IP prefix, "10.0.0.0/8" or "fd00::/8", or an IP, "10.1.2.3": the
//     address's host must be an IP literal within it;
//   - a host name, "engine-0.llm.svc", matched whole, ignoring case;
//   - "*.llm.svc.cluster.local": any name ending in ".llm.svc.cluster.local";
//   - "*": any host (the operator gives up the restriction).
//
// Names are never resolved here: a name matches only name patterns and an
// IP prefix matches only IP literals, so DNS cannot widen the set (nor
// rebind a name between the check and the dial).
type WorkerAllow struct {
	prefixes []netip.Prefix
	names    []string // lower case
	suffixes []string // ".example.com", lower case
	any      bool
	patterns []string // as given, for messages
}

// ParseWorkerAllow reads the patterns of --admin-worker-allow.
func ParseWorkerAllow(patterns []string) (*WorkerAllow, error) {
	a := &WorkerAllow{}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		a.patterns = append(a.patterns, p)
		if p == "*" {
			a.any = true
			continue
		}
		if strings.Contains(p, "/") {
			pre, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("--admin-worker-allow %q: not an IP prefix: %w", p, err)
			}
			a.prefixes = append(a.prefixes, pre.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(p, "[]")); err == nil {
			ip = ip.Unmap()
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		if rest, ok := strings.CutPrefix(p, "*."); ok {
			if rest == "" || strings.Contains(rest, "*") {
				return nil, fmt.Errorf("--admin-worker-allow %q: a wildcard is '*.' followed by a domain", p)
			}
			a.suffixes = append(a.suffixes, "."+strings.ToLower(rest))
			continue
		}
		if strings.ContainsAny(p, "*:@ ") {
			return nil, fmt.Errorf("--admin-worker-allow %q: want an IP, an IP prefix (10.0.0.0/8), a host name, *.domain or *", p)
		}
		a.names = append(a.names, strings.ToLower(p))
	}
	return a, nil
}

// Allows reports whether host (an address's host, without port or
// brackets) may be dialed. A nil WorkerAllow allows nothing.
func (a *WorkerAllow) Allows(host string) bool {
	if a == nil {
		return false
	}
	if a.any {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		for _, p := range a.prefixes {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range a.names {
		if h == n {
			return true
		}
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(h, s) && len(h) > len(s) {
			return true
		}
	}
	return false
}

// String lists the patterns, for messages ("none" when empty).
func (a *WorkerAllow) String() string {
	if a == nil || len(a.patterns) == 0 {
		return "none"
	}
	return strings.Join(a.patterns, ",")
}
