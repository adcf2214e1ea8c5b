package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
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
func newReplayScript(b *testing.B, trace string, page int) *replayScript {
	dir := os.Getenv(indexerScriptEnv)
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.script", trace, page)))
	if err != nil {
		b.Fatal(err)
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

func (s *replayScript) close(b *testing.B) {
	if s == nil {
		return
	}
	if err := s.w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := s.f.Close(); err != nil {
		b.Fatal(err)
	}
}
