package pipeline

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// BenchmarkFit is what checking a prompt's length against the fleet costs
// a request (before the queue and at placement), in fleets of every size;
// the prompt fits every engine, as nearly all do.
//
//	go test -run '^$' -bench Fit -benchmem ./pipeline/
func BenchmarkFit(b *testing.B) {
	for _, n := range []int{8, 128, 1000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ws := make([]*workers.Worker, n)
			for i := range ws {
				ws[i] = workers.NewWorker(fmt.Sprintf("grpc://w%d", i), workers.ProtocolSGLang, workers.RoleRegular,
					workers.ModelInfo{Model: "m", VocabSize: 128256, MaxContextLength: 131072, MaxInputTokens: 131071,
						EOSTokenIDs: []uint32{128001}, PageSize: 16, KVCapacityTokens: 400000, MaxRunningRequests: 256}, nil, nil)
			}
			j := &Job{InputIDs: make([]uint32, 1024)}
			j.Task = (&Pipeline{}).Generation(j)
			b.ReportAllocs()
			for b.Loop() {
				// Before the queue, and at placement.
				for range 2 {
					if err := fit(workers.RoleRegular, ws, boundsOf(ws), j); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
