package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// probe is one valid request of the prober: when it was sent and what it got.
type probe struct {
	start, end time.Time
	code       codes.Code
}

// prober sends one small valid Generate every interval, each in its own
// goroutine with its own deadline, so that a request stuck in the router's
// queue does not stop the next probes: the down time is measured on the
// probes' start times, not on how long one of them waited.
type prober struct {
	router   kvgatev1.RouterClient
	key      string
	interval time.Duration
	timeout  time.Duration

	mu     sync.Mutex
	probes []probe
	wg     sync.WaitGroup
}

// run probes until ctx ends (and at most max probes), then waits for the
// probes in flight, which their own deadlines bound.
func (p *prober) run(ctx context.Context, maxProbes int) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for n := 0; n < maxProbes; n++ {
		p.wg.Add(1)
		go p.one(n)
		select {
		case <-ctx.Done():
			p.wg.Wait()
			return
		case <-t.C:
		}
	}
	p.wg.Wait()
}

func (p *prober) one(n int) {
	defer p.wg.Done()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	ctx = withKey(ctx, p.key)
	ids := make([]uint32, 8)
	for i := range ids {
		ids[i] = uint32(32 + (n*7+i)%90) // printable ASCII bytes: in every byte-level vocabulary
	}
	maxNew := uint32(4)
	err := drain(p.router.Generate(ctx, &kvgatev1.GenerateRequest{
		InputIds:       ids,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &maxNew},
	}))
	p.mu.Lock()
	p.probes = append(p.probes, probe{start: start, end: time.Now(), code: status.Code(err)})
	p.mu.Unlock()
}

// healthyFor reports whether the last n probes (by start time), all started
// after from, succeeded.
func (p *prober) healthyFor(from time.Time, n int) bool {
	ps := p.sorted()
	if len(ps) < n {
		return false
	}
	for _, pr := range ps[len(ps)-n:] {
		if pr.code != codes.OK || pr.start.Before(from) {
			return false
		}
	}
	return true
}

func (p *prober) sorted() []probe {
	p.mu.Lock()
	ps := append([]probe(nil), p.probes...)
	p.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].start.Before(ps[j].start) })
	return ps
}

// downTime is the longest time, from `from` on, in which no valid request
// was served although one was tried: the longest interval between the ends
// of two successful probes (the first interval opens at from) that a failed
// probe ended within. A run of failures with no success after it lasts until
// end (open=true). Ends, not starts, bound it: a probe that waited in the
// router's queue until the attack stopped succeeded only then.
func downTime(ps []probe, from, end time.Time) (longest time.Duration, open bool) {
	ps = append([]probe(nil), ps...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].end.Before(ps[j].end) })
	lastOK := from
	failed := false
	for _, pr := range ps {
		if pr.end.Before(from) {
			continue
		}
		if pr.code != codes.OK {
			failed = true
			continue
		}
		if failed {
			if d := pr.end.Sub(lastOK); d > longest {
				longest, open = d, false
			}
		}
		lastOK, failed = pr.end, false
	}
	if failed {
		if d := end.Sub(lastOK); d >= longest {
			longest, open = d, true
		}
	}
	return longest, open
}

// drain reads a Generate stream to its end and returns its status error.
func drain(s grpc.ServerStreamingClient[kvgatev1.GenerateResponse], err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// withKey adds "authorization: Bearer key" when key is set.
func withKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// sample is one reading of the router process.
type sample struct {
	at         time.Time
	rssKB      int64
	goroutines int64 // -1: the metrics endpoint did not answer
}

// sampler reads the router's VmRSS every interval and its go_goroutines
// every fourth reading (a scrape costs the router more than a /proc read).
type sampler struct {
	pid      int
	metrics  string // 127.0.0.1:PORT
	interval time.Duration

	mu      sync.Mutex
	samples []sample
}

func (s *sampler) run(ctx context.Context, maxSamples int) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	g := int64(-1)
	for n := 0; n < maxSamples; n++ {
		if n%4 == 0 {
			g = goroutines(s.metrics)
		}
		rss := rssKB(s.pid)
		s.mu.Lock()
		s.samples = append(s.samples, sample{at: time.Now(), rssKB: rss, goroutines: g})
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// last returns the latest sample, or a zero one.
func (s *sampler) last() sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return sample{goroutines: -1}
	}
	return s.samples[len(s.samples)-1]
}

// peak returns the largest RSS and goroutine count sampled at or after from.
func (s *sampler) peak(from time.Time) (rss, g int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g = -1
	for _, x := range s.samples {
		if x.at.Before(from) {
			continue
		}
		rss = max(rss, x.rssKB)
		g = max(g, x.goroutines)
	}
	return rss, g
}

// rssKB reads VmRSS of pid in kB (0 when the process is gone).
func rssKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// scrape fetches the router's Prometheus text and sums every sample of the
// metrics named, over all their labels. A missing metric is absent from the
// map; an unreachable endpoint returns nil.
func scrape(addr string, names ...string) map[string]float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			rest = line[strings.LastIndexByte(line, '}')+1:]
		}
		if !want[name] {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// goroutines returns the router's go_goroutines, or -1.
func goroutines(addr string) int64 {
	m := scrape(addr, "go_goroutines")
	v, ok := m["go_goroutines"]
	if !ok {
		return -1
	}
	return int64(v)
}
