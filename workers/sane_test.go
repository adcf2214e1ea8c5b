package workers_test

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// TestWhatAnEngineCannotMeanIsUnreported: an SGLang engine whose settings
// and model information hold figures no engine can mean (a page of 1e300
// tokens, which int conversion makes negative, a negative running limit,
// capacity, vocabulary and context) joins as an engine that reports none
// of them, not with limits that turn the router's arithmetic over.
func TestWhatAnEngineCannotMeanIsUnreported(t *testing.T) {
	args, err := structpb.NewStruct(map[string]any{"page_size": 1e300, "max_running_requests": -5.0,
		"disaggregation_bootstrap_port": 8998.0})
	if err != nil {
		t.Fatal(err)
	}
	eng := &sglangEngine{
		modelInfo:  &sglang.GetModelInfoResponse{ModelPath: "/m", VocabSize: -1, MaxContextLength: -7, MaxReqInputLen: 1023},
		serverInfo: &sglang.GetServerInfoResponse{ServerArgs: args, MaxTotalNumTokens: -1},
	}
	info, err := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t))).Info(testutil.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w := workers.NewWorker("grpc://127.0.0.1:9", workers.ProtocolSGLang, workers.RoleRegular, info, nil, nil)
	got := w.Info()
	want := workers.ModelInfo{Model: "/m", MaxInputTokens: 1023, BootstrapPort: 8998}
	if got.Model != want.Model || got.VocabSize != 0 || got.MaxContextLength != 0 || got.MaxInputTokens != want.MaxInputTokens ||
		got.PageSize != 0 || got.KVCapacityTokens != 0 || got.MaxRunningRequests != 0 || got.BootstrapPort != want.BootstrapPort {
		t.Errorf("worker's information %+v (the engine's %+v); want %+v", got, info, want)
	}
}

// TestLoadPollKeepsWhatAnEngineCanMean: a load poll answered with negative
// counts and fractions outside [0, 1] is stored as counts of 0 and
// fractions held to [0, 1]; the worker's load never goes below what the
// router has in flight.
func TestLoadPollKeepsWhatAnEngineCanMean(t *testing.T) {
	tests := []struct {
		name   string
		engine workers.Load
		want   workers.Load
	}{
		{"negative counts", workers.Load{Running: -50, Waiting: -3, UsedTokens: -1, MaxTotalTokens: -9, MaxRunning: -2},
			workers.Load{}},
		{"fractions past their range", workers.Load{Running: 2, TokenUsage: 7, CacheHitRate: -0.5},
			workers.Load{Running: 2, TokenUsage: 1}},
		{"fractions that are not numbers", workers.Load{Waiting: 1, TokenUsage: math.NaN(), CacheHitRate: math.Inf(1)},
			workers.Load{Waiting: 1, CacheHitRate: 1}},
		{"counts past any engine", workers.Load{Running: math.MaxInt, MaxTotalTokens: 1 << 50},
			workers.Load{}},
		{"a load an engine can mean", workers.Load{Running: 3, Waiting: 4, UsedTokens: 100, MaxTotalTokens: 1000, MaxRunning: 8, TokenUsage: 0.1, CacheHitRate: 0.5},
			workers.Load{Running: 3, Waiting: 4, UsedTokens: 100, MaxTotalTokens: 1000, MaxRunning: 8, TokenUsage: 0.1, CacheHitRate: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestWorker("grpc://127.0.0.1:9")
			release := w.Acquire()
			defer release()
			w.BeginLoadPoll().Record(tt.engine)
			if got := w.EngineLoad(); got != tt.want {
				t.Errorf("EngineLoad = %+v, want %+v", got, tt.want)
			}
			if got := w.Load(); got < 1 {
				t.Errorf("Load = %d with a request of ours in flight", got)
			}
		})
	}
}
