package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/bench"
)

// TestBenchPeersRefusals: `kvgate bench --peers` refuses what it cannot run
// before it starts anything, naming the flag and what it accepts.
func TestBenchPeersRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown peer", []string{"--peers", "vllm-router"}, "the peer kvgate knows is smg"},
		{"a policy SMG lacks", []string{"--peers", "smg", "--policies", "bucket"}, "name kvgate:bucket"},
		{"a target", []string{"--peers", "smg", "--target", "127.0.0.1:1"}, "cannot measure a --target"},
		{"no tokenizer", []string{"--peers", "smg", "--smg-bin", "/bin/true", "--peer-tokenizer", "/nonexistent"}, "--peer-tokenizer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runBench(context.Background(), append([]string{"--groups", "1", "--prompts-per-group", "1"}, tc.args...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("bench %v: error %v, want one saying %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestWriteGoodput: with --peers, each run's goodput against --slo-ttft
// follows the table: the successful requests within the SLO, per second of
// the run and as a share of the requests sent (errors never count).
func TestWriteGoodput(t *testing.T) {
	rep := &bench.Report{Runs: []bench.PolicyRun{
		{Policy: "kvgate:cache_aware", TTFTs: []float64{500, 1500, 2000, 2500}, RequestsPerSec: 8, Requests: 4},
		{Policy: "smg:cache_aware", TTFTs: []float64{900, 3000}, RequestsPerSec: 4, Requests: 4},
	}}
	var b strings.Builder
	if err := writeGoodput(&b, rep, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	want := "goodput kvgate:cache_aware: 6.00 requests/s with TTFT <= 2s (75.0% of those sent)\n" +
		"goodput smg:cache_aware: 2.00 requests/s with TTFT <= 2s (25.0% of those sent)\n"
	if b.String() != want {
		t.Errorf("got\n%swant\n%s", b.String(), want)
	}
}
