package tree

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// BlockIndex is the vLLM tracker's block table: which backends hold which
// KV blocks of BlockSize tokens, named by 64-bit hashes. Where the Tree
// stores the tokens of every path, the index stores only a key per block and
// who holds it, so its memory does not grow with the length of the tokens
// and a lookup costs O(log(blocks)) map probes instead of a walk.
//
// Use: Keys turns a prompt into its blocks' keys (whole blocks only, as an
// engine caches them); Match returns, per backend, how many leading blocks it
// holds; Record (after routing) and Touch (on reuse) mark blocks as held and
// recently used; Evict keeps each backend within MaxBlocksPerBackend, least
// recently used blocks first; RemoveBlocks and RemoveBackend follow what
// engines and the fleet report.
//
// Keys come in two variants (BlockIndexConfig.Hash):
//
//   - HashChained: key(i) = xxh3(key(i-1) ‖ tokens of block i), key(-1) a
//     fixed seed. A key names the whole prefix up to its block, as vLLM's own
//     block hashes do, so a backend holding block k's key held the prompt's
//     exact first k+1 blocks when it was recorded.
//   - HashPosition: key(i) = xxh3(i ‖ tokens of block i), §7.1 of SMG's
//     vllm-cache-aware-design.md.
//     A key names only a block's position and content: two prompts that
//     differ early but share a block at the same position share its key.
//
// Match follows SMG's binary search (§7.3): the candidates are the
// backends holding block 0, and a candidate holds blocks [0, n) if it holds
// block n-1. That shortcut (§8.3) is sound only when a backend's holdings are
// prefix-closed: true for chained keys as long as blocks leave a backend from
// the tail (eviction here does; see Evict), never guaranteed for position
// keys, whose shared blocks make the search over-predict. VerifiedMatch
// checks every block, so benchmarks can count the difference.
//
// Epochs: LRU order comes from one atomic counter, not the clock. Record and
// Touch take one epoch per block and give the deepest block the oldest one,
// so among blocks last used together the tail goes first, and a chain a
// backend holds stays prefix-closed under eviction.
//
// Memory: each backend's blocks are bounded at all times, not only at the
// next Evict. A Record that takes a backend more than an eighth over
// MaxBlocksPerBackend starts an eviction in the background (it reads the
// whole table, so it stays off the request's path); one that finds the
// backend more than a quarter over (evictions cannot keep up, or the budget
// is below 8 blocks) evicts before it returns. The index so holds at most
// about backends × 5/4 × MaxBlocksPerBackend entries; Evict (periodic) trims
// back to MaxBlocksPerBackend exactly. An entry is pointer-free, so the
// garbage collector never scans the table.
//
// Locking: the table is split into shards by key, each behind its own
// RWMutex, so lookups on different blocks do not share a lock word and
// Evict and RemoveBackend, which visit every block, hold one shard at a time.
// A Match is not atomic against concurrent writes; it sees each block as it
// is when probed, which is what a router needs. BlockIndex is safe for
// concurrent use.
type BlockIndex struct {
	blockSize int
	maxBlocks int
	// slack is how far over maxBlocks a backend may go before a Record
	// starts an eviction; twice as far, it waits for one.
	slack   int
	chained bool
	// littleEndian: the machine stores a uint32 as its little-endian bytes.
	littleEndian bool

	shards []blockShard
	shift  uint // a key's shard is key >> shift

	epoch atomic.Uint64

	// backendsMu guards the interning tables. Writers of holdings (Record,
	// Touch, RemoveBlocks) and Evict hold it for reading while they work, so
	// RemoveBackend (the only writer) knows no holding with a retired id can
	// appear after it unlinked the name.
	backendsMu sync.RWMutex
	byName     map[string]*blockBackend
	byID       []*blockBackend // index = id; 0 is never used
	freeIDs    []uint32
	bindings   uint64 // changes of byName, for Rosters to notice

	evictMu sync.Mutex // one eviction at a time
}

// Hash variants of BlockIndexConfig.Hash.
const (
	HashChained  = "chained"
	HashPosition = "position"
)

// chainSeed stands for the key before block 0 in chained keys: a fixed value,
// so keys are the same in every process.
const chainSeed uint64 = 0x6b76676174652e62 // "kvgate.b"

// defaultBlockShards is enough shards that 8 routing goroutines rarely meet
// on one lock, and that a shard of a full index (8 backends × 100,000 blocks)
// is scanned in well under a millisecond.
const defaultBlockShards = 64

// BlockIndexConfig configures a BlockIndex.
type BlockIndexConfig struct {
	// BlockSize is the engines' tokens per KV block, ≥ 1.
	BlockSize int
	// MaxBlocksPerBackend bounds each backend's blocks, ≥ 1 (see BlockIndex
	// for how closely it is held).
	MaxBlocksPerBackend int
	// Hash is HashChained or HashPosition; "" means HashChained.
	Hash string
	// Shards is the number of lock shards, a power of two; 0 means 64. One
	// shard is a single RWMutex over the whole table.
	Shards int
}

// blockBackend is an interned backend: its id in holdings and its block count.
type blockBackend struct {
	name   string
	id     uint32
	blocks atomic.Int64
}

// blockHolder is one backend's hold on a block, with its last-use epoch.
type blockHolder struct {
	epoch uint64
	id    uint32
}

// blockEntry is a block's holders: the first inline, the others (rare: a
// block several backends hold, such as a shared system prompt's) in the
// shard's overflow lists. It holds no pointer, so the table costs the garbage
// collector nothing to scan.
type blockEntry struct {
	epoch uint64
	id    uint32
	more  uint32 // 0: no other holder; else 1 + index in blockShard.more
}

type blockShard struct {
	mu       sync.RWMutex
	blocks   map[uint64]blockEntry
	more     [][]blockHolder
	freeMore []uint32
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// NewBlockIndex returns an empty index, or the reason cfg is invalid.
func NewBlockIndex(cfg BlockIndexConfig) (*BlockIndex, error) {
	if cfg.BlockSize < 1 {
		return nil, fmt.Errorf("tree: block size %d: must be ≥ 1", cfg.BlockSize)
	}
	if cfg.MaxBlocksPerBackend < 1 {
		return nil, fmt.Errorf("tree: max blocks per backend %d: must be ≥ 1", cfg.MaxBlocksPerBackend)
	}
	x := &BlockIndex{
		blockSize: cfg.BlockSize,
		maxBlocks: cfg.MaxBlocksPerBackend,
		slack:     cfg.MaxBlocksPerBackend / 8,
		byName:    map[string]*blockBackend{},
		byID:      []*blockBackend{nil},
	}
	probe := uint32(1)
	x.littleEndian = *(*byte)(unsafe.Pointer(&probe)) == 1
	switch cfg.Hash {
	case "", HashChained:
		x.chained = true
	case HashPosition:
	default:
		return nil, fmt.Errorf("tree: block hash %q: want %s or %s", cfg.Hash, HashChained, HashPosition)
	}
	n := cfg.Shards
	if n == 0 {
		n = defaultBlockShards
	}
	if n < 1 || n&(n-1) != 0 || n > 1<<16 {
		return nil, fmt.Errorf("tree: block index shards %d: must be a power of two in [1, 65536]", cfg.Shards)
	}
	x.shards = make([]blockShard, n)
	for i := range x.shards {
		x.shards[i].blocks = map[uint64]blockEntry{}
	}
	x.shift = 64
	for m := n; m > 1; m >>= 1 {
		x.shift--
	}
	return x, nil
}

// BlockSize returns the tokens per block.
func (x *BlockIndex) BlockSize() int { return x.blockSize }

// Chained reports whether keys are chained (else position-based).
func (x *BlockIndex) Chained() bool { return x.chained }

func (x *BlockIndex) shard(key uint64) *blockShard { return &x.shards[x.shardIndex(key)] }

// shardIndex takes a key's top bits (none with one shard: a shift by 64
// gives 0 in Go); xxh3's output is uniform, so the shards fill evenly.
func (x *BlockIndex) shardIndex(key uint64) int { return int(key >> x.shift) }

// Keys returns the keys of tokens' whole blocks; a partial last block has
// none, since no engine can reuse it. Keys reads only the configuration, so
// it may run before any lock is taken.
func (x *BlockIndex) Keys(tokens []uint32) []uint64 { return x.KeysJoined(tokens, nil) }

// KeysJoined returns the keys of the whole blocks of head followed by
// tail, as Keys of the two joined would, without joining them: a finished
// request's prompt and reply, which its engine caches as one sequence.
func (x *BlockIndex) KeysJoined(head, tail []uint32) []uint64 {
	n := (len(head) + len(tail)) / x.blockSize
	keys := make([]uint64, n)
	var stack [8 + 4*64]byte
	buf := stack[:]
	if need := 8 + 4*x.blockSize; need <= len(stack) {
		buf = stack[:need]
	} else {
		buf = make([]byte, need)
	}
	prev := chainSeed
	for i := range n {
		if x.chained {
			binary.LittleEndian.PutUint64(buf, prev)
		} else {
			binary.LittleEndian.PutUint64(buf, uint64(i))
		}
		lo, hi := i*x.blockSize, (i+1)*x.blockSize
		switch {
		case hi <= len(head):
			x.putTokens(buf[8:], head[lo:hi])
		case lo >= len(head):
			x.putTokens(buf[8:], tail[lo-len(head):hi-len(head)])
		default: // the block that spans the two
			x.putTokens(buf[8:], head[lo:])
			x.putTokens(buf[8+4*(len(head)-lo):], tail[:hi-len(head)])
		}
		prev = xxh3.Hash(buf)
		keys[i] = prev
	}
	return keys
}

// putTokens writes tokens into dst as little-endian 32-bit words.
func (x *BlockIndex) putTokens(dst []byte, tokens []uint32) {
	if x.littleEndian {
		// The tokens' memory is already their little-endian bytes: one
		// copy instead of a store per token, which took over half of
		// Keys' time.
		copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens)))
		return
	}
	for j, t := range tokens {
		binary.LittleEndian.PutUint32(dst[4*j:], t)
	}
}

// backend returns name's interned backend, creating it, with backendsMu held
// for reading; the caller releases it.
func (x *BlockIndex) backend(name string) *blockBackend {
	for {
		x.backendsMu.RLock()
		if b := x.byName[name]; b != nil {
			return b
		}
		x.backendsMu.RUnlock()
		x.backendsMu.Lock()
		if x.byName[name] == nil {
			b := &blockBackend{name: name}
			if n := len(x.freeIDs); n > 0 {
				b.id, x.freeIDs = x.freeIDs[n-1], x.freeIDs[:n-1]
				x.byID[b.id] = b
			} else {
				b.id = uint32(len(x.byID))
				x.byID = append(x.byID, b)
			}
			x.byName[name] = b
			x.bindings++
		}
		x.backendsMu.Unlock()
		// Look again under the read lock: a RemoveBackend may have run in
		// between, and then the next round creates it afresh.
	}
}

// BackendBlocks is how many blocks backend holds in the index (0 for one it
// does not know); one atomic read, for a selection to weigh how full a
// worker's cache is.
func (x *BlockIndex) BackendBlocks(backend string) int {
	x.backendsMu.RLock()
	defer x.backendsMu.RUnlock()
	if b := x.byName[backend]; b != nil {
		return int(b.blocks.Load())
	}
	return 0
}

// epochs reserves n epochs and returns the newest; block i of an operation
// gets newest - i, so its deepest block is its oldest.
func (x *BlockIndex) epochs(n int) uint64 { return x.epoch.Add(uint64(n)) }

// Record marks every block of keys as held by backend and just used: SMG's
// record_request, called for the worker a request was sent to, and
// for blocks an engine reports stored. keys must be one prompt's keys from
// block 0 (Keys), or a run of them. Should it take backend more than an
// eighth over MaxBlocksPerBackend, Record starts an eviction in the
// background; more than a quarter over, it evicts before it returns.
func (x *BlockIndex) Record(keys []uint64, backend string) {
	if len(keys) == 0 {
		return
	}
	b := x.backend(backend)
	top := x.epochs(len(keys))
	added := 0
	x.eachShard(keys, func(s *blockShard, at []int32) {
		for _, i := range at {
			if s.upsert(keys[i], b.id, top-uint64(i)) {
				added++
			}
		}
	})
	n := b.blocks.Add(int64(added))
	x.backendsMu.RUnlock()
	switch {
	case n > int64(x.maxBlocks+2*x.slack):
		// Evictions are not keeping up (or the budget is tiny): this
		// Record waits for one, which holds the bound.
		x.evictMu.Lock()
		if b.blocks.Load() > int64(x.maxBlocks+x.slack) {
			x.evictLocked()
		}
		x.evictMu.Unlock()
	case n > int64(x.maxBlocks+x.slack):
		// An eviction reads the whole table (tens of milliseconds at the
		// default budget): run it beside the request, not in it.
		if x.evictMu.TryLock() {
			go func() {
				defer x.evictMu.Unlock()
				x.evictLocked()
			}()
		}
	}
}

// Touch marks the blocks of keys that backend holds as just used, as Record
// does, without adding the others: for a backend a request reused blocks on
// when its prompt is not recorded.
func (x *BlockIndex) Touch(keys []uint64, backend string) {
	if len(keys) == 0 {
		return
	}
	x.backendsMu.RLock()
	defer x.backendsMu.RUnlock()
	b := x.byName[backend]
	if b == nil {
		return
	}
	top := x.epochs(len(keys))
	x.eachShard(keys, func(s *blockShard, at []int32) {
		for _, i := range at {
			s.touch(keys[i], b.id, top-uint64(i))
		}
	})
}

// eachShard calls fn once for each shard keys fall in, with the shard's
// write lock held and the positions in keys of its keys, in order: a
// Record of 512 blocks takes each of 64 locks once instead of 512 times.
func (x *BlockIndex) eachShard(keys []uint64, fn func(s *blockShard, at []int32)) {
	if len(x.shards) == 1 || len(keys) < 2*len(x.shards) {
		var one [1]int32
		for i, k := range keys {
			s := x.shard(k)
			one[0] = int32(i)
			s.mu.Lock()
			fn(s, one[:])
			s.mu.Unlock()
		}
		return
	}
	// A counting sort of the positions by shard.
	start := make([]int32, len(x.shards)+1)
	for _, k := range keys {
		start[x.shardIndex(k)+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	at := make([]int32, len(keys))
	next := slices.Clone(start)
	for i, k := range keys {
		j := x.shardIndex(k)
		at[next[j]] = int32(i)
		next[j]++
	}
	for j := range x.shards {
		if start[j] == start[j+1] {
			continue
		}
		s := &x.shards[j]
		s.mu.Lock()
		fn(s, at[start[j]:start[j+1]])
		s.mu.Unlock()
	}
}

// VerifiedMatch is the number of leading blocks of keys backend holds,
// checking every block: the truth Match's binary search estimates. It costs
// one probe per matched block; it is for tests and benchmarks.
func (x *BlockIndex) VerifiedMatch(keys []uint64, backend string) int {
	x.backendsMu.RLock()
	b := x.byName[backend]
	x.backendsMu.RUnlock()
	if b == nil {
		return 0
	}
	n := 0
	for n < len(keys) && x.holds(keys[n], b.id) {
		n++
	}
	return n
}

func (x *BlockIndex) holds(key uint64, id uint32) bool {
	s := x.shard(key)
	s.mu.RLock()
	ok := s.holds(key, id)
	s.mu.RUnlock()
	return ok
}

// holds reports whether id holds key; s.mu is held.
func (s *blockShard) holds(key uint64, id uint32) bool {
	e, ok := s.blocks[key]
	if !ok {
		return false
	}
	if e.id == id {
		return true
	}
	if e.more != 0 {
		for _, h := range s.more[e.more-1] {
			if h.id == id {
				return true
			}
		}
	}
	return false
}

// mark sets mark[id] to v for each holder id of key that mark covers; s.mu
// is held.
func (s *blockShard) mark(key uint64, mark []bool, v bool) {
	e, ok := s.blocks[key]
	if !ok {
		return
	}
	if int(e.id) < len(mark) {
		mark[e.id] = v
	}
	if e.more != 0 {
		for _, h := range s.more[e.more-1] {
			if int(h.id) < len(mark) {
				mark[h.id] = v
			}
		}
	}
}

// upsert makes id a holder of key as of epoch and reports whether it was not
// one before; s.mu is held for writing.
func (s *blockShard) upsert(key uint64, id uint32, epoch uint64) bool {
	e, ok := s.blocks[key]
	switch {
	case !ok:
		s.blocks[key] = blockEntry{epoch: epoch, id: id}
		return true
	case e.id == id:
		e.epoch = epoch
		s.blocks[key] = e
		return false
	case e.more == 0:
		e.more = s.newMore(blockHolder{epoch: epoch, id: id})
		s.blocks[key] = e
		return true
	}
	hs := s.more[e.more-1]
	for i := range hs {
		if hs[i].id == id {
			hs[i].epoch = epoch
			return false
		}
	}
	s.more[e.more-1] = append(hs, blockHolder{epoch: epoch, id: id})
	return true
}

// touch sets id's epoch on key if id holds it; s.mu is held for writing.
func (s *blockShard) touch(key uint64, id uint32, epoch uint64) {
	e, ok := s.blocks[key]
	switch {
	case !ok:
	case e.id == id:
		e.epoch = epoch
		s.blocks[key] = e
	case e.more != 0:
		hs := s.more[e.more-1]
		for i := range hs {
			if hs[i].id == id {
				hs[i].epoch = epoch
			}
		}
	}
}

func (s *blockShard) newMore(h blockHolder) uint32 {
	if n := len(s.freeMore); n > 0 {
		i := s.freeMore[n-1]
		s.freeMore = s.freeMore[:n-1]
		s.more[i] = append(s.more[i][:0], h)
		return i + 1
	}
	s.more = append(s.more, []blockHolder{h})
	return uint32(len(s.more))
}
