package policy

import (
	"sync"
	"sync/atomic"
)

// removals remembers, per worker, the pages its engine's KV events removed
// lately, so that a completed request's outcome does not put back, as
// speculation, pages the engine has already said it evicted. A full engine
// evicts a finished request's pages soon after it stores them, often
// before the request's answer reaches the router; the outcome's
// speculative insert of the prompt and reply would then hold them in the
// tree until they expire, and the conversation's next turn would be
// predicted cached where the engine has nothing (MissSpeculation).
//
// A page is known by its position in the sequence and a hash of its
// tokens: a removal's page of the same tokens at the same depth under
// another prefix counts as removed there too, which only makes the
// outcome's speculation shorter.
//
// A removal takes the last pages of a path, and an outcome's speculation is
// cut at the first page removed since its decision, so a removal is
// remembered by its first page alone: an outcome that holds any page of the
// removal on the same path holds its first page, at a lower position, and
// is cut there, as it would be with every page remembered. An engine that
// evicts a 1K-token prompt sends 64 removed pages; hashing and recording
// each took 2.8% of the router's CPU at fresh 1K-token requests with a full
// engine. Each worker keeps its last removalsPerWorker removals; one older
// than that is no longer seen, and the outcome speculates as it did.
type removals struct {
	pageSize int
	// seq numbers removals across workers; a decision records it, and a
	// page removed with a higher number was removed after the decision.
	seq atomic.Uint64

	mu      sync.Mutex
	workers map[string]*workerRemovals
}

// removalsPerWorker bounds the removals remembered per worker, each by one
// page: 4,096 in about 192 KB.
const removalsPerWorker = 4096

// pageKey names a page by its position in its sequence (in pages) and its
// tokens' hash, folded into one word for pageNums.
func pageKey(index int, page []uint32) uint64 {
	return hashPage(page) + uint64(index)*pageMix
}

type workerRemovals struct {
	mu   sync.Mutex
	last pageNums // page → number of its latest removal
	ring [removalsPerWorker]uint64
	nums [removalsPerWorker]uint64
	next int    // ring position to write
	top  uint64 // number of the worker's latest removal
}

func newRemovals(pageSize int) *removals {
	return &removals{pageSize: pageSize, workers: map[string]*workerRemovals{}}
}

// now is the number a decision made now records.
func (r *removals) now() uint64 { return r.seq.Load() }

func (r *removals) worker(url string, create bool) *workerRemovals {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[url]
	if w == nil && create {
		w = &workerRemovals{}
		r.workers[url] = w
	}
	return w
}

// forget drops what is remembered of url.
func (r *removals) forget(url string) {
	r.mu.Lock()
	delete(r.workers, url)
	r.mu.Unlock()
}

// removed records that worker's engine removed the last pages of path, by
// the first of them.
func (r *removals) removed(worker string, path []uint32, pages int) {
	ps := r.pageSize
	first := len(path)/ps - pages
	if pages <= 0 || first < 0 {
		return
	}
	k := pageKey(first, path[first*ps:(first+1)*ps])
	n := r.seq.Add(1)
	w := r.worker(worker, true)
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.nums[w.next]; old != 0 {
		w.last.delIf(w.ring[w.next], old)
	}
	w.ring[w.next], w.nums[w.next] = k, n
	w.next = (w.next + 1) % removalsPerWorker
	w.last.put(k, n)
	w.top = n
}

// cut returns how many leading tokens of prompt followed by reply (whole
// pages) no removal on worker after decision touched: the length up to the
// first page removed since, or the whole pages when none was.
func (r *removals) cut(worker string, decision uint64, prompt, reply []uint32) int {
	ps := r.pageSize
	total := (len(prompt) + len(reply)) / ps * ps
	w := r.worker(worker, false)
	if w == nil {
		return total
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.top <= decision {
		return total
	}
	var buf []uint32
	for i := 0; i*ps < total; i++ {
		lo, hi := i*ps, (i+1)*ps
		var page []uint32
		switch {
		case hi <= len(prompt):
			page = prompt[lo:hi]
		case lo >= len(prompt):
			page = reply[lo-len(prompt) : hi-len(prompt)]
		default:
			buf = append(append(buf[:0], prompt[lo:]...), reply[:hi-len(prompt)]...)
			page = buf
		}
		if w.last.get(pageKey(i, page)) > decision {
			return lo
		}
	}
	return total
}

// hashPage hashes a page's token ids: FNV-1a's steps over two tokens at a
// time, in two lanes (alternate pairs) folded together at the end. Every
// page an engine removes is hashed, and a step's multiply waits for the one
// before it: one token per step made the hash the largest cost of
// recording a removal; two lanes of pairs are four times fewer steps in a
// row. The keys live only in this process, so any good mix will do.
func hashPage(tokens []uint32) uint64 {
	const prime = 1099511628211
	a, b := uint64(14695981039346656037), uint64(0x9ae16a3b2f90404f)
	i := 0
	for ; i+4 <= len(tokens); i += 4 {
		a = (a ^ (uint64(tokens[i]) | uint64(tokens[i+1])<<32)) * prime
		b = (b ^ (uint64(tokens[i+2]) | uint64(tokens[i+3])<<32)) * prime
	}
	for ; i < len(tokens); i++ {
		a = (a ^ uint64(tokens[i])) * prime
	}
	h := (a ^ (b<<29 | b>>35)) * 0xff51afd7ed558ccd
	return h ^ h>>32
}
