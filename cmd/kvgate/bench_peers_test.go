package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
