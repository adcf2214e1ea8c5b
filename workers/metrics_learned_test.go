package workers_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/policytest"
	"github.com/kvgate/kvgate/workers"
)

// TestCollectorExportsLearnedSpeed: the per-worker collector exports what
// the router learned of each engine's speed, each figure only once it is
// learned, so that a worker nothing has taught has none of those series
// rather than zeros that read as an infinitely fast engine. The requests
// run in a synctest bubble, whose clock makes the learned values exact.
func TestCollectorExportsLearnedSpeed(t *testing.T) {
	names := []string{
		"kvgate_worker_prefill_tokens_per_second",
		"kvgate_worker_request_duration_mean_seconds",
		"kvgate_worker_request_duration_cv",
		"kvgate_worker_decode_step_seconds",
		"kvgate_worker_decode_step_per_request_seconds",
		"kvgate_worker_decode_mean_tokens",
	}
	// request holds w for d, as a request that never decodes does.
	request := func(w *workers.Worker, d time.Duration) {
		release := w.Acquire()
		time.Sleep(d)
		release()
	}
	cases := []struct {
		name  string
		teach func(w *workers.Worker)
		want  []string // worker a's series; worker b is never taught
	}{
		{name: "nothing learned: no series", teach: func(*workers.Worker) {}},
		{name: "requests' durations: their mean and spread (sd 1 s of mean 2 s)", teach: func(w *workers.Worker) {
			request(w, time.Second)
			request(w, 3*time.Second)
		}, want: []string{
			`kvgate_worker_request_duration_cv{worker="grpc://a:1"} 0.5`,
			`kvgate_worker_request_duration_mean_seconds{worker="grpc://a:1"} 2`,
		}},
		{name: "a clean prefill: the rate, and its request's duration", teach: func(w *workers.Worker) {
			release := w.Acquire()
			p := w.Prefilling(4096)
			time.Sleep(250 * time.Millisecond)
			p.Prefilled()
			release()
		}, want: []string{
			`kvgate_worker_prefill_tokens_per_second{worker="grpc://a:1"} 16384`,
			`kvgate_worker_request_duration_cv{worker="grpc://a:1"} 0`,
			`kvgate_worker_request_duration_mean_seconds{worker="grpc://a:1"} 0.25`,
		}},
		{name: "a prefill below the rate's minimum: no rate", teach: func(w *workers.Worker) {
			p := w.Prefilling(16)
			time.Sleep(time.Millisecond)
			p.Prefilled()
		}},
		{name: "one batch size: a flat step", teach: func(w *workers.Worker) {
			policytest.Decode(w, 4, 4, 250*time.Millisecond) // 4 requests of 1 s
		}, want: []string{
			`kvgate_worker_decode_mean_tokens{worker="grpc://a:1"} 4`,
			`kvgate_worker_decode_step_per_request_seconds{worker="grpc://a:1"} 0`,
			`kvgate_worker_decode_step_seconds{worker="grpc://a:1"} 0.25`,
			`kvgate_worker_request_duration_cv{worker="grpc://a:1"} 0`,
			`kvgate_worker_request_duration_mean_seconds{worker="grpc://a:1"} 1`,
		}},
		{name: "batches of 1 and 3: the step's base and growth per request", teach: func(w *workers.Worker) {
			// 0.25 s a token alone, 0.5 s beside two others: a line of
			// 0.125 s plus 0.125 s a request. Each request lasts 2 s.
			policytest.Decode(w, 1, 8, 250*time.Millisecond)
			policytest.Decode(w, 3, 4, 500*time.Millisecond)
		}, want: []string{
			`kvgate_worker_decode_mean_tokens{worker="grpc://a:1"} 6`,
			`kvgate_worker_decode_step_per_request_seconds{worker="grpc://a:1"} 0.125`,
			`kvgate_worker_decode_step_seconds{worker="grpc://a:1"} 0.125`,
			`kvgate_worker_request_duration_cv{worker="grpc://a:1"} 0`,
			`kvgate_worker_request_duration_mean_seconds{worker="grpc://a:1"} 2`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := workers.NewRegistry()
				a := workers.NewWorker("grpc://a:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
				b := workers.NewWorker("grpc://b:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
				if err := reg.AddAll(a, b); err != nil {
					t.Fatal(err)
				}
				tc.teach(a)
				got := testutil.Series(t, workers.NewCollector(reg), names...)
				if !slices.Equal(got, tc.want) {
					t.Errorf("series:\n%q\nwant:\n%q", got, tc.want)
				}
			})
		})
	}
}
