package tree

import (
	"errors"
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mirrorRef is the brute-force model of a Mirror: what each hash was stored
// with, and reachability worked out from scratch by following parents.
type mirrorRef struct {
	ps, max int
	blocks  map[int64]refBlock
	unknown int
}

type refBlock struct {
	parent    int64
	hasParent bool
	tokens    []uint32
	copies    int // stores of it again while known, not yet removed
}

// pathOf resolves h's path from the root, if it is reachable. A chain of
// parents longer than the blocks known is a cycle, which bounds the
// recursion.
func (r *mirrorRef) pathOf(h int64, depth int) ([]uint32, bool) {
	b, ok := r.blocks[h]
	if !ok || depth > len(r.blocks) {
		return nil, false
	}
	if !b.hasParent {
		return b.tokens, true
	}
	p, ok := r.pathOf(b.parent, depth+1)
	if !ok {
		return nil, false
	}
	return cat(p, b.tokens), true
}

// reachable returns every reachable block's path, by hash.
func (r *mirrorRef) reachable() map[int64]string {
	out := map[int64]string{}
	for h := range r.blocks {
		if p, ok := r.pathOf(h, 0); ok {
			out[h] = key(p)
		}
	}
	return out
}

// gone lists the paths (in before) of the blocks in before but not in after.
func gone(before, after map[int64]string) []string {
	var out []string
	for h, p := range before {
		if _, ok := after[h]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (r *mirrorRef) store(parent int64, hasParent bool, blocks []MirrorBlock) (attached, detached []string, err error) {
	fresh := 0
	seen := map[int64]bool{}
	if hasParent {
		seen[parent] = true
	}
	for _, b := range blocks {
		if len(b.Tokens) != r.ps {
			return nil, nil, ErrPageSize
		}
	}
	for _, b := range blocks {
		if seen[b.Hash] {
			return nil, nil, ErrBlockCycle
		}
		seen[b.Hash] = true
		if _, ok := r.blocks[b.Hash]; !ok {
			fresh++
		}
	}
	if len(r.blocks)+fresh > r.max {
		return nil, nil, ErrMirrorFull
	}
	before := r.reachable()
	if !hasParent {
		parent = 0
	}
	prev, prevHas := parent, hasParent
	for _, b := range blocks {
		if e, ok := r.blocks[b.Hash]; ok && (e.parent != prev || e.hasParent != prevHas || !slices.Equal(e.tokens, b.Tokens)) {
			delete(r.blocks, b.Hash)
		}
		prev, prevHas = b.Hash, true
	}
	mid := r.reachable()
	prev, prevHas = parent, hasParent
	for _, b := range blocks {
		if e, ok := r.blocks[b.Hash]; ok {
			e.copies++
			r.blocks[b.Hash] = e
		} else {
			r.blocks[b.Hash] = refBlock{prev, prevHas, slices.Clone(b.Tokens), 0}
		}
		prev, prevHas = b.Hash, true
	}
	return gone(r.reachable(), mid), gone(before, mid), nil
}

func (r *mirrorRef) remove(hashes []int64) []string {
	before := r.reachable()
	for _, h := range hashes {
		switch e, ok := r.blocks[h]; {
		case !ok:
			r.unknown++
		case e.copies > 0:
			e.copies--
			r.blocks[h] = e
		default:
			delete(r.blocks, h)
		}
	}
	return gone(before, r.reachable())
}

// pages lists the page paths spans cover, checking each span's shape.
func pages(t *testing.T, ps int, spans []PageRun) []string {
	t.Helper()
	var out []string
	for _, s := range spans {
		if s.Pages < 1 || len(s.Path)%ps != 0 || s.Pages*ps > len(s.Path) {
			t.Fatalf("malformed span: %d pages, path of %d tokens, page size %d", s.Pages, len(s.Path), ps)
		}
		for j := range s.Pages {
			out = append(out, key(s.Path[:len(s.Path)-j*ps]))
		}
	}
	slices.Sort(out)
	return out
}

// runMirror drives a Mirror and the model through ops decoded from b. Hashes
// come from a small range and tokens mostly follow the hash, so stores
// collide with known blocks, orphans, reattachments and replacements.
func runMirror(t *testing.T, b []byte) {
	t.Helper()
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	ps, max := 1+int(next()%2), 1+int(next()%12)
	m := NewMirror(ps, max)
	// lim takes the same calls with a bound on its detached blocks; it
	// differs from the model once it forgets one, so it is held to the
	// bound and to its own consistency instead.
	lim := NewMirror(ps, max)
	lim.LimitDetached(int(next() % 4))
	r := &mirrorRef{ps: ps, max: max, blocks: map[int64]refBlock{}}
	// Some calls go through Refs (StoreFound, RemoveFound), taken now or
	// at an earlier step and kept: whatever changed since (a removal, a
	// store, a move in the table, a Clear), the answers must not.
	kept := map[int64]Ref{}
	ref := func(h int64) Ref {
		f, ok := kept[h]
		if !ok || next()%2 == 0 {
			f = m.Find(h)
			kept[h] = f
		}
		return f
	}
	tokens := func(h int64) []uint32 {
		n := ps
		switch next() % 64 {
		case 0:
			n = ps + 1
		case 1:
			n = 0
		}
		s := make([]uint32, n)
		salt := uint32(0)
		if next()%4 == 0 {
			salt = uint32(next() % 3)
		}
		for i := range s {
			s[i] = (uint32(h)*7 + salt + uint32(i)) % 5
		}
		return s
	}
	for step := 0; len(b) > 0; step++ {
		switch op := next() % 16; {
		case op < 10 || op == 15:
			parent, hasParent := int64(next()%10), op != 15 && next()%4 != 0
			// Mostly distinct hashes: a repeated one fails the call.
			blocks := make([]MirrorBlock, 1+next()%3)
			used := map[int64]bool{parent: hasParent}
			for i := range blocks {
				h := int64(next() % 10)
				for next()%8 != 0 && used[h] {
					h = (h + 1) % 10
				}
				used[h] = true
				blocks[i] = MirrorBlock{h, tokens(h)}
			}
			var found []Ref
			if next()%2 == 0 {
				for _, b := range blocks[:next()%byte(len(blocks)+1)] {
					found = append(found, ref(b.Hash))
				}
			}
			attached, detached, err := m.StoreFound(parent, hasParent, blocks, found)
			_, _, _ = lim.Store(parent, hasParent, blocks)
			wantA, wantD, wantErr := r.store(parent, hasParent, blocks)
			if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
				t.Fatalf("step %d: Store(%d, %v, %v) error %v, want %v", step, parent, hasParent, blocks, err, wantErr)
			}
			if got := pages(t, ps, attached); !slices.Equal(got, wantA) {
				t.Fatalf("step %d: Store(%d, %v, %v) attached %q, want %q", step, parent, hasParent, blocks, got, wantA)
			}
			if got := pages(t, ps, detached); !slices.Equal(got, wantD) {
				t.Fatalf("step %d: Store(%d, %v, %v) detached %q, want %q", step, parent, hasParent, blocks, got, wantD)
			}
		case op < 14:
			hashes := make([]int64, 1+next()%3)
			for i := range hashes {
				hashes[i] = int64(next() % 12)
			}
			var spans []PageRun
			if next()%2 == 0 {
				var found []Ref
				for _, h := range hashes {
					found = append(found, ref(h))
				}
				spans = m.RemoveFound(found)
			} else {
				spans = m.Remove(hashes)
			}
			got, want := pages(t, ps, spans), r.remove(hashes)
			lim.Remove(hashes)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: Remove(%v) detached %q, want %q", step, hashes, got, want)
			}
		default:
			m.Clear()
			lim.Clear()
			r.blocks = map[int64]refBlock{}
		}
		checkMirror(t, step, lim)
		if m.Len() != len(r.blocks) || m.Detached() != len(r.blocks)-len(r.reachable()) || m.Unknown() != r.unknown {
			t.Fatalf("step %d: Len/Detached/Unknown = %d/%d/%d, want %d/%d/%d", step, m.Len(), m.Detached(), m.Unknown(),
				len(r.blocks), len(r.blocks)-len(r.reachable()), r.unknown)
		}
	}
}

// checkMirror holds m to its invariants: its counts agree with its blocks,
// the detached ones are within the bound, every attached block hangs off
// an attached parent (or the root) at the right depth, and the eviction
// queue stays within a constant factor of the blocks known.
func checkMirror(t *testing.T, step int, m *Mirror) {
	t.Helper()
	detached := 0
	for h, r := range m.blocks.all() {
		e := m.block(r)
		if e.hash != h {
			t.Fatalf("step %d: block %d filed under %d", step, e.hash, h)
		}
		if !e.attached {
			detached++
			continue
		}
		switch {
		case e.hasParent && (e.up == 0 || !m.block(e.up).attached || m.block(e.up).hash != e.parent || e.depth != m.block(e.up).depth+1):
			t.Fatalf("step %d: attached block %d hangs off %v", step, h, e.up)
		case !e.hasParent && (e.up != 0 || e.depth != 1):
			t.Fatalf("step %d: attached root block %d at depth %d", step, h, e.depth)
		}
	}
	if detached != m.detached || m.detached > m.maxDetached || m.blocks.len() > m.maxBlocks {
		t.Fatalf("step %d: %d detached counted %d (bound %d), %d blocks (bound %d)",
			step, detached, m.detached, m.maxDetached, m.blocks.len(), m.maxBlocks)
	}
	if q := len(m.queue) - m.qhead; q > 2*m.blocks.len()+64 {
		t.Fatalf("step %d: eviction queue of %d for %d blocks", step, q, m.blocks.len())
	}
}

func TestMirrorAgainstReference(t *testing.T) {
	randomRuns(t, 2000, 200, 11, 32, 600, runMirror)
}

func FuzzMirror(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 11, 15, 0, 0, 1, 1, 2, 2, 0, 3, 1, 1, 0, 0, 3, 10, 1, 1})
	f.Add([]byte{1, 5, 0, 4, 1, 2, 3, 3, 15, 0, 1, 4, 4, 10, 0, 4, 0, 9, 4, 2, 0})
	f.Add([]byte("store a chain, remove its middle, store the parent back"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 2048 {
			b = b[:2048]
		}
		runMirror(t, b)
	})
}

// mirrorScript runs steps written as text on a page-size-1 mirror, where a
// block "2b" is hash 2 holding token b:
//
//	store - 1a 2b   a chain off the root
//	store 2 3c      a chain off block 2
//	remove 2 9      remove blocks 2 and 9
//	clear
//
// It returns the last step's attached and detached Spans as "ab|c" (the
// path, with | where the span's pages start), sorted, and its error.
func mirrorScript(t *testing.T, m *Mirror, steps []string) (attached, detached []string, err error) {
	t.Helper()
	show := func(spans []PageRun) []string {
		var out []string
		for _, s := range spans {
			var b strings.Builder
			for i, v := range s.Path {
				if i == len(s.Path)-s.Pages*m.pageSize {
					b.WriteByte('|')
				}
				b.WriteByte(byte('a' + v))
			}
			out = append(out, b.String())
		}
		slices.Sort(out)
		return out
	}
	for _, step := range steps {
		f := strings.Fields(step)
		attached, detached, err = nil, nil, nil
		switch f[0] {
		case "store":
			parent, perr := strconv.ParseInt(f[1], 10, 64)
			var blocks []MirrorBlock
			for _, bl := range f[2:] {
				i := strings.IndexFunc(bl, func(r rune) bool { return r >= 'a' })
				h, _ := strconv.ParseInt(bl[:i], 10, 64)
				var tokens []uint32
				for _, c := range bl[i:] {
					tokens = append(tokens, uint32(c-'a'))
				}
				blocks = append(blocks, MirrorBlock{h, tokens})
			}
			var a, d []PageRun
			a, d, err = m.Store(parent, perr == nil, blocks)
			attached, detached = show(a), show(d)
		case "remove":
			var hashes []int64
			for _, s := range f[1:] {
				h, _ := strconv.ParseInt(s, 10, 64)
				hashes = append(hashes, h)
			}
			detached = show(m.Remove(hashes))
		case "clear":
			m.Clear()
		default:
			t.Fatalf("bad step %q", step)
		}
	}
	return attached, detached, err
}

// TestMirrorSpec pins the Mirror's behaviour, one history per case: what the
// last step attached and detached, and what the mirror knows afterwards.
func TestMirrorSpec(t *testing.T) {
	cases := []struct {
		name               string
		max                int
		steps              []string
		attached, detached []string
		err                error
		len, orphans       int
	}{
		{"a chain off the root attaches", 0, []string{"store - 1a 2b 3c"}, []string{"|abc"}, nil, nil, 3, 0},
		{"one block per call extends the chain", 0, []string{"store - 1a", "store 1 2b", "store 2 3c"}, []string{"ab|c"}, nil, nil, 3, 0},
		{"a branch attaches below its parent", 0, []string{"store - 1a 2b", "store 1 3c"}, []string{"a|c"}, nil, nil, 3, 0},
		{"a chain whose parent is unknown waits, detached", 0, []string{"store 7 2b 3c"}, nil, nil, nil, 2, 2},
		{"storing the parent attaches what waited below it", 0, []string{"store 7 2b 3c", "store 1 4d", "store - 7x"},
			[]string{"x|bc", "|x"}, nil, nil, 4, 1},
		{"waiting blocks attach with every branch, one span per run", 0, []string{"store 1 2b 3c", "store 2 4d", "store - 1a"},
			[]string{"a|bd", "ab|c", "|a"}, nil, nil, 4, 0},
		{"removing a block detaches its descendants, which stay", 0, []string{"store - 1a 2b 3c", "store 2 4d", "remove 2"},
			nil, []string{"a|b", "ab|c", "ab|d"}, nil, 3, 2},
		{"the parent stored again brings them back", 0, []string{"store - 1a 2b 3c", "store 2 4d", "remove 2", "store 1 2b"},
			[]string{"a|b", "ab|c", "ab|d"}, nil, nil, 4, 0},
		{"removing a leaf", 0, []string{"store - 1a 2b", "remove 2"}, nil, []string{"a|b"}, nil, 1, 0},
		{"a chain removed leaf first is one span", 0, []string{"store - 1a 2b 3c 4d", "remove 4 3 2"},
			nil, []string{"a|bcd"}, nil, 1, 0},
		{"a run up to the root, then the children it detached", 0, []string{"store - 1a 2b 3c", "store 1 5e", "remove 3 2 1"},
			nil, []string{"|abc", "a|e"}, nil, 1, 1},
		{"a removed block's other children follow its run", 0, []string{"store - 1a 2b 3c", "store 2 4d", "remove 3 2"},
			nil, []string{"a|bc", "ab|d"}, nil, 2, 1},
		{"a run is one call's: the next call starts a path afresh", 0, []string{"store - 1a 2b 3c", "remove 3", "remove 2"},
			nil, []string{"a|b"}, nil, 1, 0},
		{"removing a parent before its child is no run", 0, []string{"store - 1a 2b 3c", "remove 2 3"},
			nil, []string{"a|b", "ab|c"}, nil, 1, 0},
		{"removing a detached block forgets it quietly", 0, []string{"store 7 2b", "remove 2"}, nil, nil, nil, 0, 0},
		{"unknown hashes are ignored", 0, []string{"store - 1a", "remove 8 9"}, nil, nil, nil, 1, 0},
		{"storing a known block again changes nothing", 0, []string{"store - 1a 2b", "store - 1a 2b"}, nil, nil, nil, 2, 0},
		{"a block stored twice stays until removed twice", 0, []string{"store - 1a 2b", "store - 1a 2b", "remove 2"},
			nil, nil, nil, 2, 0},
		{"… and leaves at its second removal", 0, []string{"store - 1a 2b", "store - 1a 2b", "remove 2", "remove 2"},
			nil, []string{"a|b"}, nil, 1, 0},
		{"a copy stored below a parent stored again counts too", 0, []string{"store - 1a 2b", "remove 1", "store - 1a 2b", "remove 2"},
			nil, nil, nil, 2, 0},
		{"a replaced block's copies go with it", 0, []string{"store - 1a 2b", "store 1 2b", "store 1 2x", "remove 2"},
			nil, []string{"a|x"}, nil, 1, 0},
		{"a known prefix, then new blocks", 0, []string{"store - 1a 2b", "store - 1a 2b 3c"}, []string{"ab|c"}, nil, nil, 3, 0},
		{"a known block with other tokens is replaced", 0, []string{"store - 1a 2b 3c", "store 1 2x"},
			[]string{"a|x", "ax|c"}, []string{"a|b", "ab|c"}, nil, 3, 0},
		{"a known block under another parent moves", 0, []string{"store - 1a 2b", "store - 5e", "store 5 2b"},
			[]string{"e|b"}, []string{"a|b"}, nil, 3, 0},
		{"a block of the wrong size fails the whole call", 0, []string{"store - 1a 2bc"}, nil, nil, ErrPageSize, 0, 0},
		{"a chain repeating a hash fails", 0, []string{"store - 1a 1b"}, nil, nil, ErrBlockCycle, 0, 0},
		{"a block naming itself as parent fails", 0, []string{"store 1 1a"}, nil, nil, ErrBlockCycle, 0, 0},
		{"past maxBlocks fails the whole call", 3, []string{"store - 1a 2b", "store 2 3c 4d"}, nil, nil, ErrMirrorFull, 2, 0},
		{"known blocks cost nothing at the cap", 2, []string{"store - 1a 2b", "store - 1a 2b"}, nil, nil, nil, 2, 0},
		{"Clear forgets everything", 0, []string{"store - 1a", "clear", "store 1 2b"}, nil, nil, nil, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMirror(1, orDefault(c.max, 100))
			attached, detached, err := mirrorScript(t, m, c.steps)
			if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			want := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
			if !slices.Equal(attached, want(c.attached)) {
				t.Errorf("attached %q, want %q", attached, want(c.attached))
			}
			if !slices.Equal(detached, want(c.detached)) {
				t.Errorf("detached %q, want %q", detached, want(c.detached))
			}
			if m.Len() != c.len || m.Detached() != c.orphans {
				t.Errorf("Len/Detached = %d/%d, want %d/%d", m.Len(), m.Detached(), c.len, c.orphans)
			}
		})
	}
}

// orDefault returns v, or def if v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func TestMirrorErrorsNameTheSizes(t *testing.T) {
	m := NewMirror(16, 10)
	_, _, err := m.Store(0, false, []MirrorBlock{{1, testutil.Tokens(0, 16)}, {2, testutil.Tokens(0, 12)}})
	if !errors.Is(err, ErrPageSize) || !strings.Contains(err.Error(), "12 tokens") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("error %q should name both sizes", err)
	}
	if m.Len() != 0 {
		t.Fatalf("a failed Store applied %d blocks", m.Len())
	}
}

func TestMirrorUnknownCountsAcrossClear(t *testing.T) {
	m := NewMirror(1, 10)
	m.Remove([]int64{1, 2})
	m.Clear()
	m.Remove([]int64{3})
	if m.Unknown() != 3 {
		t.Fatalf("Unknown = %d, want 3", m.Unknown())
	}
}

// TestMirrorStoredPathsOutliveTheirBlock checks that Store copies the
// tokens it is given: engines' event buffers get reused.
func TestMirrorStoredPathsOutliveTheirBlock(t *testing.T) {
	m := NewMirror(2, 10)
	buf := []uint32{1, 2}
	m.Store(0, false, []MirrorBlock{{1, buf}})
	buf[0], buf[1] = 8, 9
	a, _, _ := m.Store(1, true, []MirrorBlock{{2, []uint32{3, 4}}})
	if len(a) != 1 || !slices.Equal(a[0].Path, []uint32{1, 2, 3, 4}) {
		t.Fatalf("attached %+v, want the path [1 2 3 4]", a)
	}
}

// BenchmarkMirrorChain stores a chain one block per call, as engines send
// it, up to depth blocks: the cost per call should not grow with the depth.
func BenchmarkMirrorChain(b *testing.B) {
	for _, depth := range []int{64, 16384} {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			m := NewMirror(16, depth)
			tokens := testutil.Tokens(0, 16)
			b.ReportAllocs()
			for i := range b.N {
				h := int64(i % depth)
				if h == 0 {
					m.Clear()
				}
				a, _, err := m.Store(h-1, h > 0, []MirrorBlock{{h, tokens}})
				if err != nil || len(a) != 1 || len(a[0].Path) != 16*int(h+1) {
					b.Fatalf("Store: %v, %+v", err, a)
				}
			}
		})
	}
}

// TestMirrorLimitDetached: blocks under parents the engine never names are
// forgotten oldest first past the bound, whatever their number; attached
// blocks are never touched by it, and a detached block still known attaches
// when its parent comes.
func TestMirrorLimitDetached(t *testing.T) {
	m := NewMirror(1, 1<<20)
	m.LimitDetached(100)
	if a, _, err := m.Store(0, false, []MirrorBlock{{1, []uint32{1}}, {2, []uint32{2}}}); err != nil || len(a) != 1 {
		t.Fatalf("a chain off the root: %v, %v", a, err)
	}
	// A flood: 100,000 blocks, each under a parent never stored.
	for i := range int64(100_000) {
		if _, _, err := m.Store(1_000_000+i, true, []MirrorBlock{{10 + i, []uint32{7}}}); err != nil {
			t.Fatal(err)
		}
		if m.Detached() > 100 {
			t.Fatalf("after %d orphans: %d detached, bound 100", i+1, m.Detached())
		}
	}
	if m.Len() != 102 || m.Detached() != 100 || m.Evicted() != 100_000-100 {
		t.Fatalf("Len %d, Detached %d, Evicted %d; want 102, 100, 99900", m.Len(), m.Detached(), m.Evicted())
	}
	if !m.Known(1) || !m.Known(2) || m.Known(10) || !m.Known(10+99_999) {
		t.Fatal("the bound forgot an attached block, or kept the oldest orphan")
	}
	if len(m.orphans) != 100 {
		t.Fatalf("%d unknown parents kept for 100 detached blocks", len(m.orphans))
	}
	// The newest orphan's parent arrives: it attaches.
	a, _, err := m.Store(2, true, []MirrorBlock{{1_000_000 + 99_999, []uint32{3}}})
	if err != nil || len(a) != 2 || key(a[1].Path) != key([]uint32{1, 2, 3, 7}) {
		t.Fatalf("parent of a kept orphan stored: %v, %v", a, err)
	}
	if q := len(m.queue) - m.qhead; q > 2*m.Len()+64 {
		t.Fatalf("eviction queue of %d for %d blocks", q, m.Len())
	}
}
