package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestWriteMisses: a run whose predictions missed gets one line naming each
// cause with its count and share of the run's requests, and the engines'
// queue evictions; then, where measured, the requests that reached an engine
// at its running limit and the KV events' lag. Runs that predict nothing or
// missed nothing get none.
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
		{"missed, with the engines' queues and the events' lag", PolicyRun{Policy: "cache_aware", Requests: 200, Misses: &Misses{
			ByCause: map[string]int{"evicted": 10}, EngineQueueShrunk: 7, EngineQueuedFull: 31,
			EventLag: &Lag{P50: 24 * time.Millisecond, P99: 183500 * time.Microsecond}}},
			"cache_aware: prediction misses 10: evicted 10 (0.050); requests the engines admitted after evicting part of their prefix while queued: 7; " +
				"requests that reached an engine at its running limit: 31; KV event lag p50 24.0 ms, p99 183.5 ms\n"},
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

// TestHistogramQuantile: a quantile of a Prometheus histogram is read as
// histogram_quantile does: linearly within the bucket that holds it, from
// the bucket below's bound (0 for the first); in the +Inf bucket, the
// highest finite bound.
func TestHistogramQuantile(t *testing.T) {
	// 10 observations up to 1 ms, 80 more up to 10 ms, 10 more up to 100 ms.
	h := histogram([]float64{0.001, 0.01, 0.1}, []uint64{10, 90, 100}, 100)
	tests := []struct {
		q    float64
		want float64
	}{
		{0.05, 0.0005}, // half-way through the first bucket
		{0.10, 0.001},  // its top
		{0.50, 0.0055}, // half-way through the second
		{0.99, 0.091},  // nine tenths through the third
		{1.00, 0.1},    // the top
	}
	for _, tt := range tests {
		if got := histogramQuantile(h, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("q %.2f: got %v, want %v", tt.q, got, tt.want)
		}
	}
	inf := histogram([]float64{0.001}, []uint64{1}, 10)
	if got := histogramQuantile(inf, 0.99); got != 0.001 {
		t.Errorf("quantile in +Inf: got %v, want the highest bound 0.001", got)
	}
	if got := histogramQuantile(histogram([]float64{1}, []uint64{0}, 0), 0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram: got %v, want NaN", got)
	}
}

// histogram builds a histogram of cumulative counts per upper bound.
func histogram(bounds []float64, cum []uint64, total uint64) *dto.Histogram {
	h := &dto.Histogram{SampleCount: proto.Uint64(total)}
	for i, b := range bounds {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(cum[i])})
	}
	return h
}
