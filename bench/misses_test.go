package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteMisses: a run whose predictions missed gets one line naming each
// cause with its count and share of the run's requests, and the engines'
// queue evictions; runs that predict nothing or missed nothing get none.
func TestWriteMisses(t *testing.T) {
	tests := []struct {
		name string
		run  PolicyRun
		want string // "" : no line
	}{
		{"predicts nothing", PolicyRun{Policy: "round_robin", Requests: 100}, ""},
		{"missed nothing", PolicyRun{Policy: "cache_aware", Requests: 100, Misses: &Misses{ByCause: map[string]int{"evicted": 0}}}, ""},
		{"missed", PolicyRun{Policy: "cache_aware", Requests: 200, Misses: &Misses{
			ByCause: map[string]int{"evicted": 10, "speculation": 2}, EngineQueueShrunk: 7}},
			"cache_aware: prediction misses 12: speculation 2 (0.010), evicted 10 (0.050); requests the engines admitted after evicting part of their prefix while queued: 7\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeMisses(&b, []PolicyRun{tt.run})
			if got := b.String(); got != tt.want {
				t.Fatalf("got %q\nwant %q", got, tt.want)
			}
			if tt.want != "" && !strings.HasSuffix(b.String(), "\n") {
				t.Fatal("the line does not end")
			}
		})
	}
}
