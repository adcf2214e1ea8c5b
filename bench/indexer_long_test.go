package bench

import (
	"bytes"
	"cmp"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/kvgate/kvgate/tree"
)

// BenchmarkMooncakeLookupLong times the lookups that make the indexer
// benchmark's p99: the conversation trace's longest prompts (its top 1%)
// against the mirror that a replay of the whole trace (512-token blocks)
// left. Each iteration looks every one of them up once; lookup-p50-ns and
// lookup-p99-ns are over those lookups. In "warm" the same prompt was just
// looked up, so the CPU's caches hold its path; in "cold" a buffer four
// times the last-level cache is read before each lookup, as a router meets
// a conversation's next turn after thousands of other requests; "floor" is
// cold, and compares the prompt's matched tokens with a copy of them that
// is not in the caches instead of looking it up: what reading the tokens
// costs, the least an exact match can cost.
//
//	go test -run '^$' -bench MooncakeLookupLong -benchtime 3x ./bench/
func BenchmarkMooncakeLookupLong(b *testing.B) {
	recs := readTraceRecords(b, filepath.Join("testdata", "traces", "conversation_trace.jsonl"), 0)
	_, p := replayIndexer(b, recs, DefaultTraceBlockTokens, true, nil)
	long := longestPrompts(recs, len(recs)/100)
	// copies[i] holds the part of long[i] the mirror matched, for the floor.
	copies := make([][]uint32, len(long))
	for i, prompt := range long {
		best := 0
		for _, tm := range p.Lookup(nil, prompt).Tenants {
			best = max(best, tm.Tokens)
		}
		copies[i] = slices.Clone(prompt[:best])
	}
	flush := make([]uint64, 4<<20) // 32 MiB
	var buf []tree.TenantMatch     // each lookup's result, reused as the router's queue reuses it
	for _, c := range []struct {
		name string
		cold bool
		run  func(i int)
	}{
		{"warm", false, func(i int) { buf = p.Lookup(buf, long[i]).Tenants }},
		{"cold", true, func(i int) { buf = p.Lookup(buf, long[i]).Tenants }},
		{"floor", true, func(i int) { sameTokens(long[i][:len(copies[i])], copies[i]) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			var sink uint64
			for b.Loop() {
				for i := range long {
					if c.cold {
						sink += streamBuffer(flush)
					} else {
						c.run(i)
					}
					t0 := time.Now()
					c.run(i)
					ds = append(ds, time.Since(t0))
				}
			}
			reportQuantiles(b, "lookup", ds)
			if sink == 1 {
				b.Log(sink) // keeps the reads
			}
		})
	}
}

// longestPrompts returns the n longest prompts of recs.
func longestPrompts(recs []traceRecord, n int) [][]uint32 {
	byLen := slices.Clone(recs)
	slices.SortStableFunc(byLen, func(a, b traceRecord) int { return cmp.Compare(b.InputLength, a.InputLength) })
	out := make([][]uint32, 0, n)
	for _, r := range byLen[:n] {
		out = append(out, tracePrompt(r))
	}
	return out
}

// streamBuffer reads every cache line of buf, which pushes whatever else
// was in the CPU's caches out.
func streamBuffer(buf []uint64) (sum uint64) {
	for i := 0; i < len(buf); i += 8 {
		sum += buf[i]
	}
	return sum
}

// sameTokens compares two token runs as bytes, as the tree compares them.
func sameTokens(a, b []uint32) bool {
	if len(a) != len(b) || len(a) == 0 {
		return len(a) == len(b)
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
}

// reportQuantiles reports the median and 99th percentile of ds as
// name-p50-ns and name-p99-ns.
func reportQuantiles(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), name+"-p50-ns")
	b.ReportMetric(q(0.99), name+"-p99-ns")
}
