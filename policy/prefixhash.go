package policy

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/kvgate/kvgate/workers"
)

// PrefixHash is cache locality without a tree: requests whose first
// PrefixTokenCount tokens agree (a shared system prompt, a few-shot preamble,
// the earlier turns of a conversation) hash to the same point of a consistent
// hash ring and so land on the same worker, whose KV cache then holds that
// prefix. Memory is the ring (workers × 160 points); a lookup is a binary
// search.
//
// Locality yields to load: when the owner is overloaded the ring is walked to
// the next worker that is not, so the keys of a hot worker spill over to a
// fixed neighbour rather than scattering (branch "ring_overflow"). A worker is
// overloaded when its load exceeds both PrefixHashLoadFactor × the average
// load and the average plus one request, the average taken over the healthy
// candidates counting the request being placed. SMG's documented rule is the first
// test alone; the second keeps a nearly idle fleet (loads 1, 0, 0, 0: average
// 0.5, limit 0.625) from sending a prefix away from its cache for the sake of
// one request. Some worker is always within the limit (the least loaded is at
// most the average), but loads move while the ring is walked; should every
// worker be over it by then, the least loaded takes the request (branch
// "least_loaded").
type PrefixHash struct {
	tokens int
	factor float64
	rings  *ringCache
}

// NewPrefixHash returns a prefix_hash policy configured by o.PrefixHash, or
// its validation error.
func NewPrefixHash(o Options) (*PrefixHash, error) {
	if err := o.PrefixHash.Validate(); err != nil {
		return nil, err
	}
	return &PrefixHash{tokens: o.PrefixHash.TokenCount, factor: o.PrefixHash.LoadFactor, rings: newRingCache(ringVnodes)}, nil
}

func (*PrefixHash) Name() string { return "prefix_hash" }

// Forget drops the cached rings that include url.
func (p *PrefixHash) Forget(url string) { p.rings.forget(url) }

// Select routes by the hash of the prompt's first tokens; see PrefixHash.
func (p *PrefixHash) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	// Health is read once: the average, the ring walk and the fallback
	// all see the same usable workers.
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	total := 0
	for _, w := range ws {
		total += w.Load()
	}
	avg := float64(total+1) / float64(len(ws))
	limit := max(p.factor*avg, avg+1)

	h := prefixHash(req.InputIDs, p.tokens)
	in := among(ws, candidates)
	var owner workers.View
	for w := range p.rings.view(candidates).walk(h) {
		if !in(w) {
			continue
		}
		l := w.Load()
		if owner.IsZero() {
			owner = w
			if float64(l) <= limit {
				return Decision{Worker: w.Worker(), Branch: "ring",
					Reason: fmt.Sprintf("prefix_hash: owner of prefix %016x (load %d, limit %.2f)", h, l, limit)}, nil
			}
			continue
		}
		if float64(l) <= limit {
			return Decision{Worker: w.Worker(), Branch: "ring_overflow",
				Reason: fmt.Sprintf("prefix_hash: owner %s overloaded (load %d > limit %.2f), next on ring has load %d",
					owner.URL(), owner.Load(), limit, l)}, nil
		}
	}
	w := minLoadWorker(ws)
	return Decision{Worker: w.Worker(), Branch: "least_loaded",
		Reason: fmt.Sprintf("prefix_hash: every worker above limit %.2f, least loaded has %d", limit, w.Load())}, nil
}

// prefixHash is xxhash over the first n token ids as little-endian uint32s,
// which is the bytes of the ids on a little-endian machine, hashed the same
// way on any machine.
func prefixHash(ids []uint32, n int) uint64 {
	ids = ids[:min(len(ids), n)]
	d := xxhash.New()
	var buf [256]byte
	for len(ids) > 0 {
		k := min(len(ids), len(buf)/4)
		for i, id := range ids[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], id)
		}
		_, _ = d.Write(buf[:4*k])
		ids = ids[k:]
	}
	return d.Sum64()
}

// minLoadWorker returns the worker of ws with the lowest load, the first
// among equals; ws is not empty.
func minLoadWorker(ws []workers.View) workers.View {
	best, bestLoad := ws[0], ws[0].Load()
	for _, w := range ws[1:] {
		if l := w.Load(); l < bestLoad {
			best, bestLoad = w, l
		}
	}
	return best
}
