package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// Config is one `kvgate bench` invocation.
type Config struct {
	// Policies are run one after the other, each against a fresh fleet.
	// Labels are policy names, or cache_aware:least_loaded and
	// cache_aware:smallest_tree for cache_aware's miss fallbacks.
	Policies []string
	// Workers is the number of simulated engines per fleet.
	Workers int
	// Sim configures each simulated engine (see SimConfig).
	Sim sim.Config
	// Target, when set, is a running router (host:port) to measure instead of
	// in-process fleets: one run, labelled "target".
	Target string
	// Concurrency caps requests in flight (0: unlimited, which needs timed
	// arrivals: a --qps or a trace).
	Concurrency int
	// Seed is the sampling seed sent with every request, so outputs, and with
	// them multiturn histories, are the same under every policy.
	Seed int32
	// Progress, when not nil, receives a line as each run ends.
	Progress io.Writer
}

// outcome is what one request measured.
type outcome struct {
	ttft, e2e  time.Duration
	itl        []time.Duration
	prompt     int
	cached     int
	oracle     int // tokens the oracle had cached
	completion int
	worker     string
	err        error
	end        time.Time
}

// Run runs wl once per policy (or once against cfg.Target) and reports.
func Run(ctx context.Context, cfg Config, wl *Workload) (*Report, error) {
	rep := &Report{Workload: wl.Name}
	if cfg.Target != "" {
		r, err := runOnce(ctx, cfg, wl, "target", cfg.Target, nil)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, r)
		return rep, nil
	}
	for _, label := range cfg.Policies {
		f, err := StartFleet(ctx, label, cfg.Workers, cfg.Sim)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", label, err)
		}
		r, err := runOnce(ctx, cfg, wl, label, f.Addr, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", label, err)
		}
		rep.Runs = append(rep.Runs, r)
	}
	return rep, nil
}

func runOnce(ctx context.Context, cfg Config, wl *Workload, label, addr string, f *Fleet) (PolicyRun, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return PolicyRun{}, err
	}
	defer conn.Close()
	d := &driver{
		client: kvgatev1.NewRouterClient(conn),
		seed:   cfg.Seed,
	}
	if cfg.Concurrency > 0 {
		d.sem = make(chan struct{}, cfg.Concurrency)
	}
	start := time.Now()
	if wl.Conversations != nil {
		d.conversations(ctx, start, wl)
	} else {
		d.open(ctx, start, wl.Requests)
	}
	if err := ctx.Err(); err != nil {
		return PolicyRun{}, err
	}
	workers := 0
	pe := math.NaN()
	if f != nil {
		workers = f.Workers
		pe = f.PredictionExact()
	}
	r := summarize(label, start, d.outcomes, workers)
	r.PredictionExact = nullable(pe)
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: %d requests, %d errors, ttft p50 %.1f ms, cache hit %.3f (oracle %.3f)\n",
			label, r.Requests, r.Errors, r.TTFT.P50, r.CacheHitRate, r.OracleHitRate)
		if r.Errors > 0 {
			fmt.Fprintf(cfg.Progress, "%s: first error: %v\n", label, firstErr(d.outcomes))
		}
	}
	if r.Requests == r.Errors && r.Requests > 0 {
		return r, fmt.Errorf("every request failed; the first: %w", firstErr(d.outcomes))
	}
	return r, nil
}

func firstErr(os []outcome) error {
	for _, o := range os {
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// driver sends a workload's requests and collects their outcomes.
type driver struct {
	client kvgatev1.RouterClient
	seed   int32
	sem    chan struct{}

	mu       sync.Mutex
	outcomes []outcome
	oracle   Oracle
}

func (d *driver) acquire(ctx context.Context) bool {
	if d.sem == nil {
		return ctx.Err() == nil
	}
	select {
	case d.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *driver) release() {
	if d.sem != nil {
		<-d.sem
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	dt := time.Until(t)
	if dt <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(dt)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// open sends requests at their arrival times, each on its own goroutine.
func (d *driver) open(ctx context.Context, start time.Time, reqs []Request) {
	var wg sync.WaitGroup
	for _, r := range reqs {
		if !sleepUntil(ctx, start.Add(r.At)) || !d.acquire(ctx) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer d.release()
			d.send(ctx, r.Prompt, r.Output)
		}()
	}
	wg.Wait()
}

// conversations runs each user's turns in order, the next after the answer.
func (d *driver) conversations(ctx context.Context, start time.Time, wl *Workload) {
	var budget atomic.Int64
	budget.Store(int64(wl.Size()))
	var wg sync.WaitGroup
	for _, c := range wl.Conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepUntil(ctx, start.Add(c.At)) {
				return
			}
			var prompt []uint32
			for r, q := range c.Questions {
				if budget.Add(-1) < 0 || !d.acquire(ctx) {
					return
				}
				if r == 0 {
					prompt = append(slices.Clone(c.System), q...)
				} else {
					prompt = append(prompt, q...)
				}
				out := d.send(ctx, prompt, c.Output)
				d.release()
				if out == nil { // failed: the conversation ends
					return
				}
				prompt = append(slices.Clip(prompt), out...)
			}
		}()
	}
	wg.Wait()
}

// send runs one streamed Generate and records its outcome; it returns the
// output ids, or nil when the request failed.
func (d *driver) send(ctx context.Context, prompt []uint32, output int) []uint32 {
	d.mu.Lock()
	oracle := d.oracle.Match(prompt)
	d.oracle.Insert(prompt)
	d.mu.Unlock()

	maxNew := uint32(output)
	seed := d.seed
	req := &kvgatev1.GenerateRequest{
		InputIds: prompt,
		Stream:   true,
		SamplingParams: &kvgatev1.SamplingParams{
			MaxNewTokens: &maxNew,
			IgnoreEos:    true,
			Seed:         &seed,
		},
	}
	o := outcome{prompt: len(prompt), oracle: oracle}
	var ids []uint32
	// The loop leaves the stream at its completion, before io.EOF; ending
	// the context frees gRPC's state for the stream at once rather than at
	// the end of the run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	last := t0
	stream, err := d.client.Generate(ctx, req)
	for err == nil {
		var resp *kvgatev1.GenerateResponse
		if resp, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a completion")
			}
			break
		}
		now := time.Now()
		if c := resp.GetChunk(); c != nil {
			if len(c.GetTokenIds()) == 0 {
				continue
			}
			if o.ttft == 0 {
				o.ttft = now.Sub(t0)
			} else {
				o.itl = append(o.itl, now.Sub(last))
			}
			last = now
			continue
		}
		if c := resp.GetComplete(); c != nil {
			o.e2e = now.Sub(t0)
			if o.ttft == 0 {
				o.ttft = o.e2e
			}
			u := c.GetUsage()
			o.prompt = int(u.GetPromptTokens())
			o.cached = int(u.GetCachedTokens())
			o.completion = int(u.GetCompletionTokens())
			o.worker = c.GetWorker()
			ids = c.GetOutputIds()
			break
		}
	}
	o.err = err
	o.end = time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && len(ids) > 1 {
		seq := make([]uint32, 0, len(prompt)+len(ids)-1)
		d.oracle.Insert(append(append(seq, prompt...), ids[:len(ids)-1]...))
	}
	d.outcomes = append(d.outcomes, o)
	if err != nil {
		return nil
	}
	return ids
}
