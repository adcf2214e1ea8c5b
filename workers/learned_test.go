package workers_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/testutil/policytest"
	"github.com/kvgate/kvgate/workers"
)

// TestLearnedSpeed: the router learns an engine's request duration from
// Acquire to release, and its prefill rate only from prefills that found
// nothing queued ahead on an engine with a free slot, large enough that
// the engine's fixed overhead does not hide the rate, and that came to a
// first token.
func TestLearnedSpeed(t *testing.T) {
	type step struct {
		tokens   int           // Prefilling(tokens); 0: a request of duration d instead
		d        time.Duration // how long it takes
		queued   int           // tokens already queued when it is sent
		inFlight int           // requests already running when it is sent
		failed   bool          // the request ends without a first token
	}
	cases := []struct {
		name  string
		limit int
		steps []step
		run   float64 // want MeanRequestSeconds
		cv    float64 // want RequestSecondsCV, checked with run
		rate  float64 // want PrefillTokensPerSec
	}{
		{name: "nothing learned yet", run: 0, rate: 0},
		{name: "a request's duration", steps: []step{{d: 3 * time.Second}}, run: 3},
		{name: "the first samples are averaged plainly, their spread too (sd 1 s of mean 3 s)", steps: []step{{d: 2 * time.Second}, {d: 4 * time.Second}}, run: 3, cv: 1.0 / 3},
		{name: "a clean prefill times the rate", steps: []step{{tokens: 4000, d: 200 * time.Millisecond}}, rate: 20000},
		{name: "a prefill behind a queue does not", steps: []step{{tokens: 4000, d: 400 * time.Millisecond, queued: 512}}},
		{name: "a prefill waiting for a slot does not", limit: 2,
			steps: []step{{tokens: 4000, d: time.Second, inFlight: 2}}},
		{name: "a prefill below the minimum does not", steps: []step{{tokens: 512, d: 30 * time.Millisecond}}},
		{name: "a request that ends without a first token does not (it failed, or its client left)",
			steps: []step{{tokens: 4000, d: time.Millisecond, failed: true}}},
		{name: "the rate is tokens over seconds of the samples", steps: []step{
			{tokens: 2000, d: 100 * time.Millisecond}, {tokens: 6000, d: 300 * time.Millisecond}}, rate: 20000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := workers.NewWorker("grpc://a:1", workers.ProtocolSGLang, workers.RoleRegular,
					workers.ModelInfo{MaxRunningRequests: tc.limit}, nil, nil)
				for _, s := range tc.steps {
					var undo []func()
					undo = append(undo, w.Prefilling(s.queued).End)
					for range s.inFlight {
						undo = append(undo, w.Acquire())
					}
					if s.tokens > 0 {
						release := w.Acquire()
						p := w.Prefilling(s.tokens)
						time.Sleep(s.d)
						if s.failed {
							p.End()
						} else {
							p.Prefilled()
						}
						undo = append(undo, release)
					} else {
						release := w.Acquire()
						time.Sleep(s.d)
						release()
					}
					for _, f := range undo {
						f()
					}
				}
				if got := w.PendingPrefill(); got != 0 {
					t.Errorf("PendingPrefill %d after every request ended, want 0", got)
				}
				if got := w.PrefillTokensPerSec(); math.Abs(got-tc.rate) > 1e-6*tc.rate {
					t.Errorf("PrefillTokensPerSec %g, want %g", got, tc.rate)
				}
				// A prefill step's request lasts as long as its prefill,
				// so the duration is checked where the case names it.
				if got := w.MeanRequestSeconds(); (tc.run > 0 || tc.steps == nil) && math.Abs(got-tc.run) > 1e-9 {
					t.Errorf("MeanRequestSeconds %g, want %g", got, tc.run)
				}
				if got := w.RequestSecondsCV(); (tc.run > 0 || tc.steps == nil) && math.Abs(got-tc.cv) > 1e-9 {
					t.Errorf("RequestSecondsCV %g, want %g", got, tc.cv)
				}
			})
		})
	}
}

// TestInFlightAge: the ages of the requests in flight, oldest first, as an
// expected-wait policy reads them to tell when a full engine frees a slot; a
// request that ended early leaves the order of the others.
func TestInFlightAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := workers.NewWorker("grpc://a:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
		if age, rank := w.InFlightAge(time.Now(), 1); rank != 0 || age != 0 {
			t.Fatalf("nothing in flight: age %v rank %d, want 0 0", age, rank)
		}
		var releases []func()
		for range 3 { // started 3 s, 2 s and 1 s before the reading
			releases = append(releases, w.Acquire())
			time.Sleep(time.Second)
		}
		releases[1]()
		now := time.Now()
		for _, c := range []struct {
			k, rank int
			age     time.Duration
		}{
			{k: 1, rank: 1, age: 3 * time.Second},
			{k: 2, rank: 2, age: time.Second},
			{k: 5, rank: 2, age: time.Second}, // fewer in flight: the youngest
		} {
			if age, rank := w.InFlightAge(now, c.k); age != c.age || rank != c.rank {
				t.Errorf("InFlightAge(%d) = %v, rank %d; want %v, rank %d", c.k, age, rank, c.age, c.rank)
			}
		}
		releases[0]()
		releases[2]()
		if _, rank := w.InFlightAge(time.Now(), 1); rank != 0 {
			t.Errorf("all released: rank %d, want 0", rank)
		}
	})
}

// TestLearnedStep: the router learns an engine's decode step against its
// batch from the requests it relays (seconds per token after the first,
// against the requests running beside and including each): a line where
// the batch varies, flat where it does not or where the fitted line would
// shorten the step as the batch grows.
func TestLearnedStep(t *testing.T) {
	type decode struct {
		batch    int           // requests running, this one included
		perToken time.Duration // its time per token after the first
	}
	line := func(base, per time.Duration, batches ...int) []decode {
		var out []decode
		for _, b := range batches {
			out = append(out, decode{b, base + per*time.Duration(b)})
		}
		return out
	}
	ms := func(d float64) float64 { return d / 1000 }
	cases := []struct {
		name    string
		limit   int
		decodes []decode
		want    workers.StepModel
		learned bool
	}{
		{name: "nothing learned yet"},
		{name: "one batch size: flat at its mean", decodes: []decode{{4, 20 * time.Millisecond}, {4, 30 * time.Millisecond}},
			want: workers.StepModel{Base: ms(25), Tokens: 10}, learned: true},
		{name: "batches of 1 to 8 on a line: its base and slope",
			decodes: line(10*time.Millisecond, 6*time.Millisecond, 1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1),
			want:    workers.StepModel{Base: ms(10), PerRequest: ms(6), Tokens: 10}, learned: true},
		{name: "a step that shortens as the batch grows is noise: flat at the mean",
			decodes: []decode{{1, 30 * time.Millisecond}, {5, 10 * time.Millisecond}},
			want:    workers.StepModel{Base: ms(20), Tokens: 10}, learned: true},
		{name: "a line below 0 at no batch: through 0 and the mean instead (15 ms at a mean batch of 3)",
			decodes: []decode{{2, 5 * time.Millisecond}, {4, 25 * time.Millisecond}},
			want:    workers.StepModel{PerRequest: ms(5), Tokens: 10}, learned: true},
		{name: "requests beyond the running limit wait and do not decode: the batch is at most the limit", limit: 2,
			decodes: []decode{{4, 30 * time.Millisecond}, {2, 20 * time.Millisecond}},
			want:    workers.StepModel{Base: ms(25), Tokens: 10}, learned: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := workers.NewWorker("grpc://a:1", workers.ProtocolVLLM, workers.RoleRegular,
					workers.ModelInfo{MaxRunningRequests: tc.limit}, nil, nil)
				for _, d := range tc.decodes {
					policytest.Decode(w, d.batch, 10, d.perToken)
				}
				got, ok := w.Step()
				if ok != tc.learned || math.Abs(got.Base-tc.want.Base) > 1e-9 || math.Abs(got.PerRequest-tc.want.PerRequest) > 1e-9 || got.Tokens != tc.want.Tokens {
					t.Errorf("Step() = %+v, %v; want %+v, %v", got, ok, tc.want, tc.learned)
				}
			})
		})
	}
}
