package server_test

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// BenchmarkTracingCost measures what tracing adds to a request: the same
// Chat (template, tokenizer, policy, one engine leg, 8 output tokens)
// through a router without tracing and through one exporting every span to
// an OTLP receiver on loopback. The two routers take turns in blocks of 250
// requests, so that both see the same machine (2 shared cores whose speed
// drifts between runs), and each "on" block ends with a flush, so that its
// export is paid inside it. The process's CPU time (user + system) and
// allocations are summed per router: they cover client, router, simulated
// engines (no delays) and, with tracing on, the exporter and the receiver
// decoding its batches, so the difference is an upper bound on the router's
// cost.
//
//	go test -run '^$' -bench TracingCost -benchtime 4000x -count 3 ./server/
func BenchmarkTracingCost(b *testing.B) {
	req := &kvgatev1.ChatRequest{
		Messages: []*kvgatev1.ChatMessage{
			{Role: "system", Content: "You are a helpful assistant who answers briefly."},
			{Role: "user", Content: "What is the capital of France, and why is it famous?"},
		},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true},
	}
	off := startFleet(b, fleetOptions{text: true})
	tf := startTracedFleet(b, fleetOptions{text: true})
	tp := tf.tp.TracerProvider.(*sdktrace.TracerProvider)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	run := func(f *fleet) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if r, err := f.chat(rctx, b, req); err != nil || r.complete == nil {
			b.Fatalf("Chat: %v", err)
		}
	}
	for range 50 { // warm the caches and the connections
		run(off)
		run(tf.fleet)
	}
	const block = 250
	var cost [2]usage // off, on
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		for i, f := range []*fleet{off, tf.fleet} {
			u0 := measure(b)
			for range n {
				run(f)
			}
			if i == 1 {
				if err := tp.ForceFlush(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			cost[i].add(measure(b).sub(u0))
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(cost[0].cpu.Microseconds())/n, "off-cpu-us/op")
	b.ReportMetric(float64(cost[1].cpu.Microseconds())/n, "on-cpu-us/op")
	b.ReportMetric(float64(cost[1].cpu)/float64(cost[0].cpu), "on/off-cpu")
	b.ReportMetric(float64(cost[0].allocs)/n, "off-allocs/op")
	b.ReportMetric(float64(cost[1].allocs)/n, "on-allocs/op")
	b.ReportMetric(float64(cost[1].bytes-cost[0].bytes)/n, "added-B/op")
}

// usage is CPU time and allocations, process-wide.
type usage struct {
	cpu           time.Duration
	allocs, bytes uint64
}

func (u *usage) add(v usage) { u.cpu += v.cpu; u.allocs += v.allocs; u.bytes += v.bytes }
func (u usage) sub(v usage) usage {
	return usage{cpu: u.cpu - v.cpu, allocs: u.allocs - v.allocs, bytes: u.bytes - v.bytes}
}

func measure(b *testing.B) usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), allocs: ms.Mallocs, bytes: ms.TotalAlloc}
}
