//go:build unix

package tokenize

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkColdText is kvgate's side of scripts/tokenizers/cold.sh: encode throughput on text
// no tokenizer has seen (written per run by scripts/tokenizers/gentext.mjs), each measurement on
// a tokenizer loaded afresh, so its per-word caches start empty, as the reference's do in the
// script's other half. It is skipped unless the script sets:
//
//	KVGATE_COLD_TEXT        directory of <group>.txt files
//	KVGATE_COLD_TOKENIZERS  comma-separated directories under testdata/tokenizers
//	KVGATE_COLD_IDS         optional: directory to write kvgate-<tokenizer>-<group>.ids into
//	                        (the ids in decimal, space-separated), for the script to compare
//	KVGATE_COLD_RESET       optional, for profiles: "1" loads each tokenizer once and empties
//	                        its per-word caches before every encode instead (what a fresh load
//	                        gives the word caches, without the loads filling the profile), so
//	                        that -benchtime 200x takes seconds, not minutes
//
// Besides ns/op (wall time), it reports cpu-ns/op, the process's user+system CPU time over the
// encode, which load from other processes on the machine inflates much less than wall time.
//
// Run it with -benchtime 1x: one timed encode per count; the load, and a GC after it so that
// the load's garbage is not collected on the encode's time, are outside the timer. Before a
// tokenizer's first measurement a throwaway copy of it encodes testdata/long-64k.txt, so that
// the process is warm (heap grown, code paged in) while every measured copy's caches are empty,
// as the script's reference side does: a long-running process meeting text it has not seen.
func BenchmarkColdText(b *testing.B) {
	dir := os.Getenv("KVGATE_COLD_TEXT")
	if dir == "" {
		b.Skip("KVGATE_COLD_TEXT is not set: scripts/tokenizers/cold.sh runs this benchmark")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no <group>.txt in %s (%v)", dir, err)
	}
	slices.Sort(files)
	idsDir := os.Getenv("KVGATE_COLD_IDS")
	reset := os.Getenv("KVGATE_COLD_RESET") == "1"
	for _, name := range strings.Split(os.Getenv("KVGATE_COLD_TOKENIZERS"), ",") {
		path := filepath.Join(testdataDir(), "tokenizers", name)
		b.Run(name, func(b *testing.B) {
			warmProcess(b, path)
			for _, f := range files {
				text, err := os.ReadFile(f)
				if err != nil {
					b.Fatal(err)
				}
				group := strings.TrimSuffix(filepath.Base(f), ".txt")
				b.Run(group, func(b *testing.B) {
					ids := encodeCold(b, path, string(text), reset)
					if idsDir != "" {
						writeIDs(b, filepath.Join(idsDir, fmt.Sprintf("kvgate-%s-%s.ids", name, group)), ids)
					}
				})
			}
		})
	}
}

// encodeCold times Encode on a freshly loaded tokenizer at every iteration, or with reset on
// one tokenizer whose per-word caches are emptied before every iteration.
func encodeCold(b *testing.B, path, text string, reset bool) []uint32 {
	b.SetBytes(int64(len(text)))
	var ids []uint32
	var cpu time.Duration
	var tok *Tokenizer
	var err error
	for b.Loop() {
		b.StopTimer()
		switch {
		case reset && tok != nil:
			tok.model.resetCaches()
		default:
			if tok, err = Load(path); err != nil {
				b.Fatalf("%v: run scripts/tokenizers/cold.sh, which fetches what it needs", err)
			}
			runtime.GC()
		}
		b.StartTimer()
		c0 := processCPU(b)
		if ids, err = tok.Encode(text, false); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU(b) - c0
	}
	b.ReportMetric(float64(len(ids)), "tokens/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	return ids
}

// processCPU is the user+system CPU time of the whole process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// warmProcess encodes the 64 KB test document once on a throwaway tokenizer.
func warmProcess(b *testing.B, path string) {
	tok, err := Load(path)
	if err != nil {
		b.Fatalf("%v: run scripts/tokenizers/cold.sh, which fetches what it needs", err)
	}
	text, err := os.ReadFile(filepath.Join(testdataDir(), "long-64k.txt"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tok.Encode(string(text), false); err != nil {
		b.Fatal(err)
	}
}

func writeIDs(b *testing.B, file string, ids []uint32) {
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprint(&sb, id)
	}
	sb.WriteByte('\n')
	if err := os.WriteFile(file, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}
