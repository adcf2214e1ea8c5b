package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/internal/testutil"
)

// kvMirror is a cache rebuilt from KV events alone, as a router holds it. It
// is strict: an event that does not fit what came before (a stored page whose
// parent is unknown or which is already held, a removal of an unknown page or
// of one with children, a gap in the numbering) is an error, so a test finds
// missing events as well as surplus ones.
type kvMirror struct {
	pageSize int
	next     uint64 // the sequence number expected next
	pages    map[int64]*mirrorPage
	removed  int // pages removed one by one (evictions), for the test's coverage
}

type mirrorPage struct {
	tokens    []uint32
	parent    int64
	hasParent bool
	children  int
}

func newKVMirror(pageSize int) *kvMirror {
	return &kvMirror{pageSize: pageSize, pages: map[int64]*mirrorPage{}}
}

func (m *kvMirror) apply(b *smgcommon.KvEventBatch) error {
	if b.GetSequenceNumber() != m.next {
		return fmt.Errorf("batch %d, want %d", b.GetSequenceNumber(), m.next)
	}
	m.next++
	for _, ev := range b.GetEvents() {
		if err := m.applyEvent(ev); err != nil {
			return fmt.Errorf("batch %d, event %d: %w", b.GetSequenceNumber(), ev.GetEventId(), err)
		}
	}
	return nil
}

func (m *kvMirror) applyEvent(ev *smgcommon.KvCacheEvent) error {
	switch d := ev.GetData().(type) {
	case *smgcommon.KvCacheEvent_Stored:
		blocks := d.Stored.GetBlocks()
		if len(blocks) != 1 {
			return fmt.Errorf("stored event with %d blocks, want 1", len(blocks))
		}
		blk := blocks[0]
		if int(blk.GetBlockSize()) != m.pageSize || len(blk.GetTokenIds()) != m.pageSize {
			return fmt.Errorf("block of %d tokens, block_size %d, want both %d", len(blk.GetTokenIds()), blk.GetBlockSize(), m.pageSize)
		}
		if _, held := m.pages[blk.GetBlockHash()]; held {
			return fmt.Errorf("block %d stored twice", blk.GetBlockHash())
		}
		p := &mirrorPage{tokens: blk.GetTokenIds()}
		if d.Stored.ParentBlockHash != nil {
			parent, ok := m.pages[d.Stored.GetParentBlockHash()]
			if !ok {
				return fmt.Errorf("block %d hangs off unknown block %d", blk.GetBlockHash(), d.Stored.GetParentBlockHash())
			}
			parent.children++
			p.parent, p.hasParent = d.Stored.GetParentBlockHash(), true
		}
		m.pages[blk.GetBlockHash()] = p
	case *smgcommon.KvCacheEvent_Removed:
		for _, h := range d.Removed.GetBlockHashes() {
			p, ok := m.pages[h]
			switch {
			case !ok:
				return fmt.Errorf("removed unknown block %d", h)
			case p.children > 0:
				return fmt.Errorf("removed block %d, which still has %d children", h, p.children)
			}
			if p.hasParent {
				m.pages[p.parent].children--
			}
			delete(m.pages, h)
			m.removed++
		}
	case *smgcommon.KvCacheEvent_Cleared:
		clear(m.pages)
	default:
		return errors.New("event with no data")
	}
	return nil
}

// paths is the mirror in Engine.CachedPages's terms.
func (m *kvMirror) paths() [][]uint32 {
	out := make([][]uint32, 0, len(m.pages))
	for _, p := range m.pages {
		path := slices.Clone(p.tokens)
		for q := p; q.hasParent; {
			q = m.pages[q.parent]
			path = append(slices.Clone(q.tokens), path...)
		}
		out = append(out, path)
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

// TestKvEventsRebuildCache: a subscriber that applies every event in order
// holds exactly the engine's cache, page for page, through admissions,
// cached outputs, evictions under a small cache, concurrent requests and a
// flush, on both protocols.
func TestKvEventsRebuildCache(t *testing.T) {
	const pageSize = 4
	forEachProtocol(t, func(c *Config) {
		c.PageSize = pageSize
		c.KVCapacityTokens = 16 * pageSize
	}, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := srv.Engine()
		recv, err := c.subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the subscription", func() bool { return e.Stats().KVSubscribers == 1 })
		m := newKVMirror(pageSize)
		// check brings the mirror up to every batch published so far (the
		// engine is idle) and compares it with the engine's cache.
		check := func(when string) {
			t.Helper()
			for next := e.Stats().KVNextSequence; m.next < next; {
				b, err := recv()
				if err != nil {
					t.Fatalf("%s: recv: %v", when, err)
				}
				if err := m.apply(b); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
			}
			if got, want := m.paths(), e.CachedPages(); !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("%s: mirror holds %d pages, the engine %d:\nmirror %v\nengine %v", when, len(got), len(want), got, want)
			}
		}

		// Prompts over a three-token alphabet from a few stems share
		// prefixes at every depth; up to 10 pages each, in a 16-page cache.
		rng := rand.New(rand.NewPCG(1, 2))
		stems := [][]uint32{nil, {1, 2, 3, 1, 2, 3, 1, 2}, {3, 3, 3, 3}, {2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1}}
		newPrompt := func() []uint32 {
			p := slices.Clone(stems[rng.IntN(len(stems))])
			for n := 1 + rng.IntN(40-len(p)); n > 0; n-- {
				p = append(p, uint32(1+rng.IntN(3)))
			}
			return p
		}
		for round := range 30 {
			if round == 15 {
				if err := e.flushCache(); err != nil {
					t.Fatal(err)
				}
				check("after the flush")
			}
			// Four concurrent requests, which pin pages, queue for room and
			// cache their outputs when they finish.
			var wg sync.WaitGroup
			results := make([]result, 4)
			for i := range results {
				p := genParams{prompt: newPrompt(), maxNew: u32(uint32(1 + rng.IntN(8))), ignoreEOS: true}
				wg.Go(func() { results[i] = generate(t, c, p) })
			}
			wg.Wait()
			for i, r := range results {
				if r.err != nil || r.final == nil {
					t.Fatalf("round %d, request %d: err %v, final %v", round, i, r.err, r.final)
				}
			}
			check(fmt.Sprintf("round %d", round))
		}
		if m.removed < 20 {
			t.Fatalf("weak run: %d pages evicted", m.removed)
		}
		if n := e.Stats().CachedPages; n != len(m.pages) {
			t.Fatalf("Stats.CachedPages %d, mirror %d", n, len(m.pages))
		}
	})
}
