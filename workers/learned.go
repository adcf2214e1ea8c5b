package workers

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// learnedAlpha is the weight of a new sample in the learned averages: about
// the last twenty requests count, so a change of the engine's speed (a
// longer output mix, a slower engine) shows within seconds under load.
const learnedAlpha = 0.05

// minRateSample is the fewest prompt tokens a prefill must have to teach the
// prefill rate: below it the engine's fixed per-request overhead and the
// network's round trip dominate its time to first token, and the rate would
// read low.
const minRateSample = 1024

// learned is what the router learns about an engine's speed from the
// requests it relays: how long a request holds one of its running slots, and
// how fast it prefills. An expected-wait policy turns queues into seconds
// with them. Writers take mu; readers load the published values without it,
// since policies read every candidate's on every selection.
type learned struct {
	mu sync.Mutex
	// runSec is the moving mean of a request's time from Acquire to its
	// release, runSq that of its square; runN counts their samples.
	runSec, runSq float64
	runN          int
	// tok and sec are the moving means of a clean prefill's tokens and its
	// time to first token; their ratio is the prefill rate.
	tok, sec float64
	rateN    int

	meanRun, runCV, rate atomic.Uint64 // float64 bits; 0 until learned
}

// ewma folds sample x into the mean m of n earlier samples: the plain mean
// while there are few, so the first samples are not diluted by a zero start.
func ewma(m, x float64, n int) float64 {
	a := max(learnedAlpha, 1/float64(n+1))
	return m + a*(x-m)
}

func (l *learned) observeRun(d time.Duration) {
	if d <= 0 {
		return
	}
	l.mu.Lock()
	x := d.Seconds()
	l.runSec = ewma(l.runSec, x, l.runN)
	l.runSq = ewma(l.runSq, x*x, l.runN)
	l.runN++
	l.meanRun.Store(math.Float64bits(l.runSec))
	l.runCV.Store(math.Float64bits(math.Sqrt(max(l.runSq-l.runSec*l.runSec, 0)) / l.runSec))
	l.mu.Unlock()
}

func (l *learned) observePrefill(tokens int, d time.Duration) {
	if tokens < minRateSample || d <= 0 {
		return
	}
	l.mu.Lock()
	l.tok = ewma(l.tok, float64(tokens), l.rateN)
	l.sec = ewma(l.sec, d.Seconds(), l.rateN)
	l.rateN++
	l.rate.Store(math.Float64bits(l.tok / l.sec))
	l.mu.Unlock()
}

// MeanRequestSeconds is the moving mean of how long a request of this
// router's held the worker (from Acquire to its release), 0 until one has
// ended: with the engine's running-request limit it says how soon a slot
// frees on a full engine.
func (w *Worker) MeanRequestSeconds() float64 {
	return math.Float64frombits(w.learned.meanRun.Load())
}

// RequestSecondsCV is the spread of those durations, their standard
// deviation over MeanRequestSeconds (0 until one has ended): near 0, the
// requests running on a full engine end in the order they started, each
// about that long after its start; near 1 or over, as likely in any order,
// one about every MeanRequestSeconds ÷ the running limit.
func (w *Worker) RequestSecondsCV() float64 {
	return math.Float64frombits(w.learned.runCV.Load())
}

// PrefillTokensPerSec is the engine's prefill rate as measured on this
// router's requests that found its prefill queue empty (their uncached
// tokens over their time to first token), 0 until one of at least
// minRateSample tokens has come back.
func (w *Worker) PrefillTokensPerSec() float64 {
	return math.Float64frombits(w.learned.rate.Load())
}

// MeanRequestSeconds is Worker.MeanRequestSeconds.
func (v View) MeanRequestSeconds() float64 { return v.w.MeanRequestSeconds() }

// RequestSecondsCV is Worker.RequestSecondsCV.
func (v View) RequestSecondsCV() float64 { return v.w.RequestSecondsCV() }

// InFlightAge is Worker.InFlightAge.
func (v View) InFlightAge(now time.Time, k int) (time.Duration, int) { return v.w.InFlightAge(now, k) }

// PrefillTokensPerSec is Worker.PrefillTokensPerSec.
func (v View) PrefillTokensPerSec() float64 { return v.w.PrefillTokensPerSec() }
