package workers

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// HealthConfig tunes the health monitor. Zero fields take the defaults of
// DefaultHealthConfig.
type HealthConfig struct {
	// Interval between two rounds of checks.
	Interval time.Duration
	// Timeout of one check; a check that takes longer has failed.
	Timeout time.Duration
	// FailureThreshold consecutive failed checks mark a healthy worker
	// unhealthy. More than one, so that a single slow answer from a busy
	// engine does not take it out of rotation.
	FailureThreshold int
	// SuccessThreshold consecutive passed checks bring an unhealthy worker
	// back, so that a flapping engine does not receive traffic on every
	// lucky answer.
	SuccessThreshold int
	// OnChange, when set, is called from the monitor's goroutine each time the
	// monitor flips a worker's health (for metrics and logs). It must not
	// block.
	OnChange func(w *Worker, healthy bool)
	// Probe is what a check asks the engine (see HealthProbe); the zero
	// value, ProbeAuto, chooses per worker from what the engine answers.
	Probe HealthProbe
	// OnCheck, when set, is called from the monitor's goroutine with each
	// worker's check result, every round (nil under ProbeNone), for
	// metrics and tests. It must not block.
	OnCheck func(w *Worker, err error)
}

// DefaultHealthConfig returns the monitor's defaults: a check every 10 s with a
// 5 s timeout, 3 failures to mark a worker unhealthy and 2 successes to bring
// it back.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{
		Interval:         10 * time.Second,
		Timeout:          5 * time.Second,
		FailureThreshold: 3,
		SuccessThreshold: 2,
	}
}

func (c HealthConfig) withDefaults() HealthConfig {
	d := DefaultHealthConfig()
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = d.FailureThreshold
	}
	if c.SuccessThreshold <= 0 {
		c.SuccessThreshold = d.SuccessThreshold
	}
	return c
}

// RunHealthChecks checks every registered worker's health once at start and
// then every cfg.Interval, and flips Worker.SetHealthy after the configured
// number of consecutive failures or successes. Workers added to the registry
// later are picked up on the next round. It returns when ctx is done; checks
// cut short by that are not counted. log may be nil.
func RunHealthChecks(ctx context.Context, reg *Registry, cfg HealthConfig, log *slog.Logger) {
	cfg = cfg.withDefaults()
	log = orDiscard(log)
	streaks := make(map[*Worker]*healthStreak)
	probers := make(map[any]*prober)

	every(ctx, cfg.Interval, func() {
		ws := reg.Snapshot()
		errs := checkConnections(ctx, ws, cfg.Timeout, func(w *Worker) *prober {
			p := probers[w.sameConnection()]
			if p == nil {
				p = newProber(cfg.Probe, w.endpoint, log)
				probers[w.sameConnection()] = p
			}
			return p
		})
		if ctx.Err() != nil {
			return
		}

		seen := make(map[*Worker]bool, len(ws))
		conns := make(map[any]bool, len(ws))
		for i, w := range ws {
			seen[w] = true
			conns[w.sameConnection()] = true
			w.setHealthCheckInUse(probers[w.sameConnection()].used)
			if cfg.OnCheck != nil {
				cfg.OnCheck(w, errs[i])
			}
			s := streaks[w]
			if s == nil {
				s = &healthStreak{healthy: w.Healthy()}
				streaks[w] = s
			}
			if s.record(ctx, w, errs[i], cfg, log) {
				healthy := w.Healthy()
				if healthy {
					log.Info("worker healthy again", "worker", w.URL(), "successes", cfg.SuccessThreshold)
				} else {
					log.Warn("worker unhealthy", "worker", w.URL(), "failures", cfg.FailureThreshold, "err", errs[i])
				}
				if cfg.OnChange != nil {
					cfg.OnChange(w, healthy)
				}
			} else if errs[i] != nil {
				log.Debug("health check failed", "worker", w.URL(), "consecutive", s.failures, "err", errs[i])
			}
		}
		// Forget workers that have left the registry.
		for w := range streaks {
			if !seen[w] {
				delete(streaks, w)
			}
		}
		for c := range probers {
			if !conns[c] {
				delete(probers, c)
			}
		}
	})
}

// checkConnections runs one health check per connection, concurrently, with
// the connection's prober, and returns each worker's result: the ranks of
// one engine share its answer, since they share its process and connection.
func checkConnections(ctx context.Context, ws []*Worker, timeout time.Duration, proberOf func(*Worker) *prober) []error {
	byConn := make(map[any]*error, len(ws))
	var wg sync.WaitGroup
	for _, w := range ws {
		key := w.sameConnection()
		if byConn[key] != nil {
			continue
		}
		res := new(error)
		byConn[key] = res
		p := proberOf(w)
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			*res = p.check(cctx, w)
		})
	}
	wg.Wait()
	errs := make([]error, len(ws))
	for i, w := range ws {
		errs[i] = *byConn[w.sameConnection()]
	}
	return errs
}

// healthStreak counts one worker's consecutive check results.
type healthStreak struct {
	// healthy is the worker's state as the monitor last left it. When someone
	// else has changed it since (the server marking a worker failed), the
	// counts belong to the old state and start afresh.
	healthy             bool
	failures, successes int
	// other is how the engine differs from the worker it joined as (see
	// refreshLimits) while that keeps it unhealthy; "" otherwise.
	other string
	// seen is the worker's Reconnections when its engine's information
	// was last read (a failed read leaves it, to read at the next check).
	seen int64
}

// record adds one check result and applies a threshold crossing to w. It
// reports whether it changed w's health.
//
// A worker coming back may be a restarted engine with other limits: they
// are read (refreshLimits) before it is marked healthy, so no request is
// placed on it by the old ones. So are those of a healthy worker whose
// connection came back since they were last read: an engine restarted
// between two checks. One that serves another model, vocabulary or page
// size is kept unhealthy, asked again at each passing check: requests for
// the old model would get the new one's answers, and its mirror would hash
// other pages.
func (s *healthStreak) record(ctx context.Context, w *Worker, err error, cfg HealthConfig, log *slog.Logger) (changed bool) {
	if cur := w.Healthy(); cur != s.healthy {
		*s = healthStreak{healthy: cur, other: s.other, seen: s.seen}
	}
	if err != nil {
		s.failures++
		s.successes = 0
		if s.healthy && s.failures >= cfg.FailureThreshold {
			changed = true
		}
	} else {
		s.successes++
		s.failures = 0
		if !s.healthy && s.successes >= cfg.SuccessThreshold {
			changed = true
		}
	}
	reconnected := err == nil && s.healthy && w.Reconnections() != s.seen
	if changed && !s.healthy || reconnected {
		seen := w.Reconnections()
		other, read := refreshLimits(ctx, w, cfg.Timeout, log)
		if read {
			s.seen = seen // else asked again at the next passing check
		}
		switch {
		case other == "":
		case other != s.other:
			log.Warn("worker kept out of routing: its engine answers health checks but now serves "+other+
				"; it rejoins when it serves what it joined with, or when it is registered again (RemoveWorker, then AddWorker)",
				"worker", w.URL())
		default:
			log.Debug("worker still kept out of routing: its engine serves "+other, "worker", w.URL())
		}
		s.other = other
		if other != "" {
			// Not back; or, healthy, out now.
			changed = s.healthy
		}
	}
	if changed {
		s.healthy = !s.healthy
		w.SetHealthy(s.healthy)
	}
	return changed
}

// DefaultLoadPollInterval is RunLoadPolls' interval when it is given none. A
// GetLoads call is cheap for the engine, and fresher figures let policies see
// load from other clients sooner.
const DefaultLoadPollInterval = time.Second

// RunLoadPolls reads every registered worker's own load figures (GetLoads) once
// at start and then every interval (0 means DefaultLoadPollInterval), and records them with Worker.SetEngineLoad.
// A failed poll keeps the previous figures; noticing a dead worker is the
// health monitor's job. Each poll is bounded by its own timeout
// (LoadPollHooks.Timeout), not by the interval, and an engine is asked
// again only once its last poll has ended, so polls never pile up and an
// engine slower than the interval still gets its figures recorded. An
// engine answering UNIMPLEMENTED lacks GetLoads: it is not asked again
// until LackingRecheck has passed (its load is then what this router has in
// flight on it), and that is logged once per worker. It returns when ctx is
// done and its polls have ended. log may be nil.
func RunLoadPolls(ctx context.Context, reg *Registry, interval time.Duration, log *slog.Logger) {
	RunLoadPollsWith(ctx, reg, interval, LoadPollHooks{}, log)
}

// BusyLoadPollInterval is the GetLoads interval while requests wait in the
// router for an engine with room (LoadPollHooks.Busy): a request bound a
// poll late waits that much longer, and polls then are few engines' worth.
const BusyLoadPollInterval = 100 * time.Millisecond

// LoadPollHooks adapt the load polls to the router's state.
type LoadPollHooks struct {
	// Busy, when set and true, shortens the interval to
	// BusyLoadPollInterval (when it is longer) for the next round.
	Busy func() bool
	// Polled, when set, is called after each round of polls in which a
	// poll recorded an engine's figures, or that found nothing to poll or
	// wait for: the figures that say which engines have room are fresh. A round waits for the
	// polls it started until the next round is due, no longer: an engine
	// slower than that has its figures recorded when they come, and
	// announced by the round after. A round whose polls failed, or are
	// still under way, calls nothing: no figure changed, and nobody
	// waiting for one is woken for nothing every BusyLoadPollInterval.
	Polled func()
	// Wake, when set, receives when requests start waiting: the wait under
	// way, chosen while nobody waited, may be an interval long, so the
	// next one is chosen again at once, counted from the last round's
	// start (a round is due at once if BusyLoadPollInterval has passed).
	Wake <-chan struct{}
	// Timeout bounds one GetLoads poll; 0 means DefaultHealthConfig's
	// Timeout. The router passes its health check timeout: a GetLoads is
	// as light a call as a health check, and an engine that takes longer
	// to answer one is what the operator called failing. The interval is
	// no bound: a loaded Python engine answers GetLoads in more than
	// 100 ms, and against an interval that short every poll was cancelled
	// and its figures never recorded, when fresh ones matter most.
	Timeout time.Duration
}

// RunLoadPollsWith is RunLoadPolls with hooks.
func RunLoadPollsWith(ctx context.Context, reg *Registry, interval time.Duration, hooks LoadPollHooks, log *slog.Logger) {
	log = orDiscard(log)
	if interval <= 0 {
		interval = DefaultLoadPollInterval
	}
	timeout := hooks.Timeout
	if timeout <= 0 {
		timeout = DefaultHealthConfig().Timeout
	}
	var mu sync.Mutex
	told := map[string]bool{} // workers whose missing GetLoads was logged
	lacking := func(ws []*Worker, url string, err error) bool {
		if !Lacks(RPCGetLoads, err) {
			return false
		}
		for _, w := range ws {
			w.MarkLacking(RPCGetLoads, err)
		}
		mu.Lock()
		first := !told[url]
		told[url] = true
		mu.Unlock()
		if first {
			log.Info("engine does not implement GetLoads; its load is what this router has in flight on it, and GetLoads is asked again rarely",
				"worker", url, "recheck_after", LackingRecheck, "err", err)
		}
		return true
	}
	next := func() time.Duration {
		if hooks.Busy != nil && interval > BusyLoadPollInterval && hooks.Busy() {
			return BusyLoadPollInterval
		}
		return interval
	}
	// polls holds each engine's poll under way (a DP group's, or a
	// worker's), closed when it ends, until a round sees it ended; only
	// this goroutine reads or writes the map. all ends every poll before
	// this function returns.
	polls := map[any]*loadPollRun{}
	var all sync.WaitGroup
	defer all.Wait()
	start := func(key any, poll func(context.Context) (recorded bool)) (done chan struct{}, ok bool) {
		if polls[key] != nil {
			return nil, false // still asking: no second poll, no cancelling the first
		}
		run := &loadPollRun{done: make(chan struct{})}
		polls[key] = run
		all.Go(func() {
			defer close(run.done)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			run.recorded = poll(cctx)
		})
		return run.done, true
	}
	everyAdaptive(ctx, next, hooks.Wake, func() {
		began := time.Now()
		recorded := forgetEnded(polls) // since the last round's end
		var started []chan struct{}
		polled := map[*dpGroup]bool{}
		ws := reg.Snapshot()
		forgetGone(&mu, told, ws)
		for _, w := range ws {
			if !w.Implements(RPCGetLoads) {
				continue
			}
			if g := w.group; g != nil {
				// One GetLoads per engine gives every rank its figure.
				if !polled[g] {
					polled[g] = true
					if done, ok := start(g, func(cctx context.Context) bool {
						err := g.poll(cctx)
						if err != nil && ctx.Err() == nil && !lacking(g.members, g.endpoint, err) {
							log.Debug("load poll failed", "worker", g.endpoint, "err", err)
						}
						return err == nil
					}); ok {
						started = append(started, done)
					}
				}
				continue
			}
			if done, ok := start(w, func(cctx context.Context) bool {
				poll := w.BeginLoadPoll()
				l, err := w.Backend().Loads(cctx)
				if err != nil {
					if ctx.Err() == nil && !lacking([]*Worker{w}, w.URL(), err) {
						log.Debug("load poll failed", "worker", w.URL(), "err", err)
					}
					return false
				}
				poll.Record(l)
				return true
			}); ok {
				started = append(started, done)
			}
		}
		awaitPolls(ctx, started, func() time.Time { return began.Add(next()) }, hooks.Wake)
		if recorded += forgetEnded(polls); (recorded > 0 || len(polls) == 0) && hooks.Polled != nil {
			hooks.Polled()
		}
	})
}

// loadPollRun is one engine's load poll: done is closed when it ends,
// recorded set before that when it recorded the engine's figures.
type loadPollRun struct {
	done     chan struct{}
	recorded bool
}

// forgetEnded drops the polls that have ended, so that polls holds only
// those under way (a worker gone from the registry is dropped once its
// last poll ends), and returns how many of them recorded figures.
func forgetEnded(polls map[any]*loadPollRun) (recorded int) {
	for key, run := range polls {
		select {
		case <-run.done:
			delete(polls, key)
			if run.recorded {
				recorded++
			}
		default:
		}
	}
	return recorded
}

// awaitPolls waits until every poll of done has ended, or the next round
// is due (due(), asked again when wake receives: a shorter interval then
// ends the wait sooner), or ctx is done. It starts no goroutine, so a
// stalled engine costs one waiting round, not one more goroutine a round.
func awaitPolls(ctx context.Context, done []chan struct{}, due func() time.Time, wake <-chan struct{}) {
	if len(done) == 0 {
		return
	}
	t := time.NewTimer(time.Until(due()))
	defer t.Stop()
	for _, d := range done {
		for waiting := true; waiting; {
			select {
			case <-d:
				waiting = false
			case <-t.C:
				return
			case <-ctx.Done():
				return
			case <-wake:
				t.Reset(time.Until(due()))
			}
		}
	}
}

// forgetGone drops from told the engines no worker of ws is on, so that
// it stays as small as the registry.
func forgetGone(mu *sync.Mutex, told map[string]bool, ws []*Worker) {
	mu.Lock()
	defer mu.Unlock()
	if len(told) == 0 {
		return
	}
	here := make(map[string]bool, len(ws))
	for _, w := range ws {
		here[w.URL()], here[w.endpoint] = true, true
	}
	for url := range told {
		if !here[url] {
			delete(told, url)
		}
	}
}

// every runs f now and then every interval until ctx is done. A round that
// overruns the interval delays the next one rather than overlapping it.
func every(ctx context.Context, interval time.Duration, f func()) {
	everyAdaptive(ctx, func() time.Duration { return interval }, nil, f)
}

// everyAdaptive is every with the interval asked of next: after each round,
// and again whenever wake receives, so that a shorter interval takes effect
// at once instead of after a wait chosen before it. Each round is due next()
// after the last one began (at once if that has passed); a nil wake never
// receives.
func everyAdaptive(ctx context.Context, next func() time.Duration, wake <-chan struct{}, f func()) {
	if ctx.Err() != nil {
		return
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		began := time.Now()
		f()
		t.Reset(time.Until(began.Add(next())))
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				break wait
			case <-wake:
				t.Reset(time.Until(began.Add(next())))
			}
		}
	}
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
