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

	// bx, by, bxx, bxy are the moving means of a decoding request's batch
	// (the engine's requests in flight beside and including it), of its
	// seconds per output token, and of their products: a least-squares
	// line through them is the engine's decode step against its batch.
	bx, by, bxx, bxy float64
	// tokens is the moving mean of those requests' tokens after the first.
	tokens float64
	stepN  int
	// The published StepModel, float64 bits, as meanRun is: a reader may
	// see one field of the next model beside the others of this one,
	// which prices a candidate no worse than either. stepTokens is 0
	// until a request has decoded.
	stepBase, stepPer, stepTokens atomic.Uint64
}

// StepModel is an engine's decode step as this router's requests measure
// it: Base seconds plus PerRequest seconds for each request in its batch;
// and Tokens, how many tokens a request decodes after its first, on
// average: for so many steps a request added to a batch lengthens each
// step of the requests beside it by PerRequest.
type StepModel struct {
	Base, PerRequest, Tokens float64
}

// Seconds is the step's length with batch requests in flight.
func (m StepModel) Seconds(batch int) float64 { return m.Base + m.PerRequest*float64(batch) }

// minBatchVariance is the least variance of the batches seen for the step
// to be fitted as a line: below it the batch hardly varied, the slope is
// noise, and the step is taken as flat at the mean.
const minBatchVariance = 0.25

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

// observeDecode folds in a request that produced tokens after its first
// in d, with batch requests in flight on the engine on average.
func (l *learned) observeDecode(tokens int, d time.Duration, batch float64) {
	if tokens <= 0 || d <= 0 || batch <= 0 {
		return
	}
	y := d.Seconds() / float64(tokens)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bx = ewma(l.bx, batch, l.stepN)
	l.by = ewma(l.by, y, l.stepN)
	l.bxx = ewma(l.bxx, batch*batch, l.stepN)
	l.bxy = ewma(l.bxy, batch*y, l.stepN)
	l.tokens = ewma(l.tokens, float64(tokens), l.stepN)
	l.stepN++
	m := StepModel{Base: l.by, Tokens: l.tokens}
	if v := l.bxx - l.bx*l.bx; v >= minBatchVariance {
		// A step never shortens as the batch grows; a fitted line that
		// says so is noise, taken as flat.
		m.PerRequest = max((l.bxy-l.bx*l.by)/v, 0)
		m.Base = l.by - m.PerRequest*l.bx
		if m.Base < 0 { // the line through the mean from a step of 0
			m.Base, m.PerRequest = 0, l.by/l.bx
		}
	}
	l.stepBase.Store(math.Float64bits(m.Base))
	l.stepPer.Store(math.Float64bits(m.PerRequest))
	l.stepTokens.Store(math.Float64bits(m.Tokens))
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

// Step is the engine's decode step against its batch, as measured on this
// router's requests (see Worker.Decoding); ok is false until one has
// decoded. A request sent to an engine that is decoding waits for its
// steps: for the one running to end, then for the one that carries its
// prefill, each longer the more requests the engine runs. An engine that
// batches prefill with decode (vLLM's scheduler; a CPU engine most of
// all) slows every request it admits in proportion to its batch, well
// below its running-request limit.
func (w *Worker) Step() (m StepModel, ok bool) {
	l := &w.learned
	m.Tokens = math.Float64frombits(l.stepTokens.Load())
	if m.Tokens == 0 {
		return StepModel{}, false
	}
	m.Base = math.Float64frombits(l.stepBase.Load())
	m.PerRequest = math.Float64frombits(l.stepPer.Load())
	return m, true
}

// Step is Worker.Step.
func (v View) Step() (StepModel, bool) { return v.w.Step() }

// MeanRequestSeconds is Worker.MeanRequestSeconds.
func (v View) MeanRequestSeconds() float64 { return v.w.MeanRequestSeconds() }

// RequestSecondsCV is Worker.RequestSecondsCV.
func (v View) RequestSecondsCV() float64 { return v.w.RequestSecondsCV() }

// InFlightAge is Worker.InFlightAge.
func (v View) InFlightAge(now time.Time, k int) (time.Duration, int) { return v.w.InFlightAge(now, k) }

// PrefillTokensPerSec is Worker.PrefillTokensPerSec.
func (v View) PrefillTokensPerSec() float64 { return v.w.PrefillTokensPerSec() }
