package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// indexerScriptEnv names a directory where BenchmarkMooncakeIndexer writes,
// for each trace and block size it replays with reported capacities, the
// replay it made as a script another indexer can follow (bench/dynamo-indexer reads it into
// Dynamo's indexers): the same lookups, in the same order, between the
// same KV events. Unset, nothing is written.
const indexerScriptEnv = "KVGATE_INDEXER_SCRIPT"

// replayScript writes a replay, one line per lookup or event:
//
//	L <worker> <cached pages> <n> <local hash 1> … <local hash n>
//	S <worker> <parent hash or -> <block hash> <local hash>
//	R <worker> <block hash>
//
// A lookup's local hashes name the contents of the prompt's whole pages: at
// 512-token pages, the trace's hash ids (each id is one page, as Dynamo's
// benchmark counts them); at other sizes, a hash of the page's tokens alone;
// the engine's answer, the pages it held of the prompt, follows so the
// reader can check its index matched as the engine did. Each lookup line is
// followed by the events of serving that request on the chosen worker. Block
// hashes are the simulated engine's chained page names, printed unsigned.
type replayScript struct {
	f *os.File
	w *bufio.Writer
	// local names each page hash of the current prompt by its hash id, for
	// the stored events that name the page by its hash alone.
	local map[int64]uint64
}

// newReplayScript opens the script for the trace replayed at page-token
// blocks in the directory the environment names, or returns nil when it
// names none.
func newReplayScript(tb testing.TB, trace string, page int) *replayScript {
	dir := os.Getenv(indexerScriptEnv)
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.script", trace, page)))
	if err != nil {
		tb.Fatal(err)
	}
	return &replayScript{f: f, w: bufio.NewWriterSize(f, 1<<20), local: map[int64]uint64{}}
}

// request records one request: the lookup of rec's prompt, the worker
// chosen and what it held, then the events batch of serving it there.
func (s *replayScript) request(worker int, cachedPages int, rec traceRecord, prompt []uint32, page int, batch *workers.KVEventBatch) {
	if s == nil {
		return
	}
	n := len(prompt) / page
	clear(s.local)
	var parent int64
	fmt.Fprintf(s.w, "L %d %d %d", worker, cachedPages, n)
	for i := range n {
		toks := prompt[i*page : (i+1)*page]
		parent = pageHash(parent, toks)
		local := uint64(pageHash(0, toks))
		if page == DefaultTraceBlockTokens {
			local = uint64(rec.HashIDs[i])
		}
		s.local[parent] = local
		fmt.Fprintf(s.w, " %d", local)
	}
	s.w.WriteByte('\n')
	for _, ev := range batch.Events {
		switch ev.Kind {
		case workers.KVStored:
			p := "-"
			if ev.HasParent {
				p = fmt.Sprint(uint64(ev.Parent))
			}
			for _, blk := range ev.Blocks {
				local, ok := s.local[blk.Hash]
				if !ok {
					panic(fmt.Sprintf("indexer script: stored page %d is not a page of the prompt", blk.Hash))
				}
				fmt.Fprintf(s.w, "S %d %s %d %d\n", worker, p, uint64(blk.Hash), local)
				p = fmt.Sprint(uint64(blk.Hash))
			}
		case workers.KVRemoved:
			for _, h := range ev.Hashes {
				fmt.Fprintf(s.w, "R %d %d\n", worker, uint64(h))
			}
		}
	}
}

func (s *replayScript) close(tb testing.TB) {
	if s == nil {
		return
	}
	if err := s.w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := s.f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestReplayScriptFollowsTheEngines writes the script of a short replay
// and follows it with the simplest index there is (each worker's blocks,
// found from the root by their local hashes): every lookup must find in
// the chosen worker's blocks exactly the pages its engine held, as the
// indexers that read the script are checked to.
func TestReplayScriptFollowsTheEngines(t *testing.T) {
	for _, page := range []int{DefaultTraceBlockTokens, 16} {
		t.Run(fmt.Sprint("page=", page), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(indexerScriptEnv, dir)
			recs := readTraceRecords(t, filepath.Join("testdata", "traces", "conversation_trace.jsonl"), 300)
			script := newReplayScript(t, "conversation", page)
			replayIndexer(&testing.B{}, recs, page, true, script)
			script.close(t)
			followScript(t, filepath.Join(dir, fmt.Sprintf("conversation-%d.script", page)), len(recs))
		})
	}
}

// followScript checks a script as TestReplayScriptFollowsTheEngines says.
func followScript(t *testing.T, path string, requests int) {
	t.Helper()
	type block struct{ parent, local uint64 } // parent 0: the root
	type worker struct {
		blocks map[uint64]block
		kids   map[[2]uint64]uint64 // (parent, local) → block; parent 0 with root
	}
	ws := map[string]*worker{}
	of := func(name string) *worker {
		if ws[name] == nil {
			ws[name] = &worker{blocks: map[uint64]block{}, kids: map[[2]uint64]uint64{}}
		}
		return ws[name]
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return n
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	lookups, hits := 0, 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		w := of(fs[1])
		switch fs[0] {
		case "L":
			lookups++
			at, held := uint64(0), 0 // at: the block reached, 0 for the root
			for _, h := range fs[4:] {
				next, ok := w.kids[[2]uint64{at, num(h)}]
				if !ok {
					break
				}
				at = next
				held++
			}
			if want := int(num(fs[2])); held != want {
				t.Fatalf("lookup %d: worker %s holds %d pages of the prompt in the script, its engine held %d", lookups, fs[1], held, want)
			}
			hits += held
		case "S":
			hash, local := num(fs[3]), num(fs[4])
			b := block{local: local}
			if fs[2] != "-" {
				b.parent = num(fs[2])
				if _, ok := w.blocks[b.parent]; !ok {
					t.Fatalf("worker %s stores %d below %d, which it does not hold", fs[1], hash, b.parent)
				}
			}
			w.blocks[hash] = b
			w.kids[[2]uint64{b.parent, local}] = hash
		case "R":
			hash := num(fs[2])
			b, ok := w.blocks[hash]
			if !ok {
				t.Fatalf("worker %s removes %d, which it does not hold", fs[1], hash)
			}
			delete(w.blocks, hash)
			delete(w.kids, [2]uint64{b.parent, b.local})
		default:
			t.Fatalf("%s: a line of kind %q", path, fs[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lookups != requests || hits == 0 {
		t.Fatalf("%d lookups with %d pages held in all; want %d lookups and some pages held", lookups, hits, requests)
	}
}
