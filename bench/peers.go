package bench

// `kvgate bench --peers smg`: another router, as a process of its own, in
// front of the same simulated fleet as kvgate, driven with the same workload
// by the same clients, each router through the front it has.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers/sim"
)

// PeerSMG names SMG (the smg package on PyPI) as a peer.
const PeerSMG = "smg"

// kvgateProcess labels runs of `kvgate serve` in a process of its own, the
// side kvgate takes beside a peer.
const kvgateProcess = "kvgate"

// smgPolicies are the policies of SMG's --policy that need nothing but
// worker URLs (manual and consistent_hashing route by a header the bench
// does not send).
var smgPolicies = []string{"cache_aware", "round_robin", "random", "power_of_two", "least_load", "prefix_hash"}

// PeerConfig says how `kvgate bench --peers` runs the routers it compares.
type PeerConfig struct {
	// Peers are the other routers run beside kvgate: PeerSMG.
	Peers []string
	// SMGBin is SMG's launcher (`smg`, from PyPI's smg package).
	SMGBin string
	// Executable is the kvgate binary: kvgate runs as `kvgate serve` in a
	// process of its own, as the peer does, so that each router's CPU time
	// and memory are its own, without the clients' or the engines'.
	Executable string
	// TokenizerDir holds the tokenizer files (tokenizer.json and its
	// configuration) of the token ids the workloads draw: Llama 3's. The
	// simulated engines serve it through GetTokenizer, and SMG is given it
	// as --tokenizer-path, so both routers load the same files.
	TokenizerDir string
	// ThroughputDuration is how long each router's throughput run lasts
	// (0: none): ThroughputConcurrency clients send 1K-token prompts for
	// one output token each to engines without latency, as fast as the
	// router answers.
	ThroughputDuration    time.Duration
	ThroughputConcurrency int
	// Stderr receives the routers' logs (warnings and errors); nil: discarded.
	Stderr io.Writer
	// ServeArgs are more flags for `kvgate serve` (kvgate bench's
	// admission and late-binding flags).
	ServeArgs []string
}

// RouterCost is what a router's process spent during a run, read from
// /proc: its CPU time (user and system, every thread) per 1,000 requests,
// and its peak resident memory (VmHWM) since it started.
type RouterCost struct {
	Process            string  `json:"process"`
	CPUSecondsPer1K    float64 `json:"cpu_s_per_1k_requests"`
	PeakRSSMiB         float64 `json:"peak_rss_mib"`
	EngineCacheHitRate float64 `json:"engine_cache_hit_rate"`
}

// PeerThroughput is the most requests/s one router sustained with 1K-token
// prompts against engines without latency, and its CPU meanwhile.
type PeerThroughput struct {
	Router         string  `json:"router"`
	RequestsPerSec float64 `json:"requests_per_s"`
	CPUusPerReq    float64 `json:"router_cpu_us_per_request"`
	Cores          float64 `json:"router_cores"`
	Requests       int     `json:"requests"`
	Errors         int     `json:"errors"`
}

// peerRun is one run of a comparison: a router and its policy.
type peerRun struct {
	router string // kvgateProcess, PeerSMG, or "" for the bench's own process
	policy string
}

func (r peerRun) label() string {
	if r.router == "" {
		return r.policy
	}
	return r.router + ":" + r.policy
}

// PeerRuns expands policy labels into the runs of a comparison with peers,
// alternating the routers: a plain policy name runs as kvgate:P, then as
// P on each peer (smg:P); "kvgate:P" or "smg:P" runs on that router only;
// Pooled, and kvgate's policies with variants, run in the bench's own
// process as without peers.
func PeerRuns(labels, peers []string) ([]string, error) {
	runs, err := peerRuns(labels, peers)
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.label()
	}
	return out, err
}

func peerRuns(labels, peers []string) ([]peerRun, error) {
	for _, p := range peers {
		if p != PeerSMG {
			return nil, fmt.Errorf("--peers %q: the peer kvgate knows is %s", p, PeerSMG)
		}
	}
	var runs []peerRun
	for _, label := range labels {
		router, name, prefixed := strings.Cut(label, ":")
		switch {
		case prefixed && router == kvgateProcess:
			if base, _, err := ParsePolicy(name); err != nil || base != name || name == Pooled {
				return nil, fmt.Errorf("policy %q: kvgate serve runs a plain policy name (%s)", label, strings.Join(policy.Names(), ", "))
			}
			runs = append(runs, peerRun{kvgateProcess, name})
		case prefixed && slices.Contains(peers, router):
			if !slices.Contains(smgPolicies, name) {
				return nil, fmt.Errorf("policy %q: %s runs here with %s", label, router, strings.Join(smgPolicies, ", "))
			}
			runs = append(runs, peerRun{router, name})
		case label == Pooled || prefixed:
			if _, _, err := ParsePolicy(label); err != nil {
				return nil, err
			}
			runs = append(runs, peerRun{"", label})
		default:
			if _, _, err := ParsePolicy(label); err != nil {
				return nil, err
			}
			runs = append(runs, peerRun{kvgateProcess, label})
			for _, p := range peers {
				if !slices.Contains(smgPolicies, label) {
					return nil, fmt.Errorf("policy %q: %s has no such policy here (%s); name kvgate:%s to run it on kvgate alone", label, p, strings.Join(smgPolicies, ", "), label)
				}
				runs = append(runs, peerRun{p, label})
			}
		}
	}
	return runs, nil
}

// RunPeers runs wl once per run of peerRuns(cfg.Policies, pc.Peers), each
// against a fresh fleet of cfg.Workers simulated engines, then, with a
// pc.ThroughputDuration, each router's throughput with cache_aware.
func RunPeers(ctx context.Context, cfg Config, pc PeerConfig, wl *Workload) (*Report, error) {
	runs, err := peerRuns(cfg.Policies, pc.Peers)
	if err != nil {
		return nil, err
	}
	if pc.TokenizerDir == "" {
		return nil, fmt.Errorf("--peers needs the tokenizer files of the workloads' token ids (--peer-tokenizer)")
	}
	if pc.ThroughputConcurrency <= 0 {
		pc.ThroughputConcurrency = 64
	}
	pc.Stderr = sharedStderr(pc.Stderr)
	rep := &Report{Workload: wl.Name}
	for _, run := range runs {
		var r PolicyRun
		if run.router == "" {
			r, err = runFleet(ctx, cfg, wl, run.policy, 1)
		} else {
			r, err = runPeer(ctx, cfg, pc, wl, run)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", run.label(), err)
		}
		rep.Runs = append(rep.Runs, r)
	}
	if pc.ThroughputDuration <= 0 {
		return rep, nil
	}
	routers := []string{kvgateProcess}
	routers = append(routers, pc.Peers...)
	for _, router := range routers {
		t, err := peerThroughput(ctx, cfg, pc, peerRun{router, "cache_aware"})
		if err != nil {
			return nil, fmt.Errorf("%s throughput: %w", router, err)
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s throughput: %.0f requests/s, %.0f µs router CPU per request, %.2f cores\n",
				t.Router, t.RequestsPerSec, t.CPUusPerReq, t.Cores)
		}
		rep.Throughput = append(rep.Throughput, t)
	}
	return rep, nil
}

// peerFleet is simulated engines in this process with one router, kvgate or
// a peer, in a process of its own in front of them.
type peerFleet struct {
	sims   []*sim.Process
	router *routerProc
	front  front
	base   []sim.Stats // the engines' counters once the router was ready
}

// startPeerFleet starts n engines with sc and the router of run in front.
func startPeerFleet(ctx context.Context, pc PeerConfig, run peerRun, n int, sc sim.Config) (f *peerFleet, err error) {
	f = &peerFleet{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	sc.TokenizerDir = pc.TokenizerDir
	var urls []string
	for i := range n {
		s, err := sim.Start(sc, "127.0.0.1:0")
		if err != nil {
			return f, fmt.Errorf("start simulated engine %d: %w", i, err)
		}
		f.sims = append(f.sims, s)
		urls = append(urls, "grpc://"+s.Addr())
	}
	if f.router, f.front, err = startRouter(ctx, pc, run, urls, sc.Model); err != nil {
		return f, err
	}
	for _, s := range f.sims {
		f.base = append(f.base, s.Engine().Stats())
	}
	return f, nil
}

// engineCounts are the engines' own counts since the router was ready:
// requests per engine, and prompt and cached prompt tokens over all.
func (f *peerFleet) engineCounts() (requests []int, prompt, cached uint64) {
	for i, s := range f.sims {
		st := s.Engine().Stats()
		requests = append(requests, int(st.Requests-f.base[i].Requests))
		prompt += st.PromptTokens - f.base[i].PromptTokens
		cached += st.CachedPromptTokens - f.base[i].CachedPromptTokens
	}
	return requests, prompt, cached
}

func (f *peerFleet) close() {
	if f.front != nil {
		f.front.close()
	}
	if f.router != nil {
		f.router.stop()
	}
	for _, s := range f.sims {
		s.Stop()
	}
}

// runPeer runs wl through the router of run in front of a fresh fleet.
func runPeer(ctx context.Context, cfg Config, pc PeerConfig, wl *Workload, run peerRun) (PolicyRun, error) {
	f, err := startPeerFleet(ctx, pc, run, cfg.Workers, cfg.Sim)
	if err != nil {
		return PolicyRun{}, err
	}
	defer f.close()
	cpu0, err := f.router.cpu()
	if err != nil {
		return PolicyRun{}, err
	}
	var cpu1 time.Duration
	var cpuErr error
	r, err := drive(ctx, cfg, wl, run.label(), f.front, cfg.Workers, func() { cpu1, cpuErr = f.router.cpu() })
	if err != nil {
		return PolicyRun{}, err
	}
	if cpuErr != nil {
		return PolicyRun{}, cpuErr
	}
	hwm, err := f.router.peakRSS()
	if err != nil {
		return PolicyRun{}, err
	}
	// The engines' own counts, for every router alike: SMG names no worker
	// in its answers, and neither router's account of usage is taken on
	// trust.
	requests, prompt, cached := f.engineCounts()
	r.LoadCoV = CoV(requests)
	cost := &RouterCost{Process: f.router.name, PeakRSSMiB: float64(hwm) / (1 << 20)}
	if ok := r.Requests - r.Errors; ok > 0 {
		cost.CPUSecondsPer1K = (cpu1 - cpu0).Seconds() * 1000 / float64(ok)
	}
	if prompt > 0 {
		cost.EngineCacheHitRate = float64(cached) / float64(prompt)
	}
	r.Router = cost
	return r, reportRun(cfg, r)
}

// peerThroughput measures how many requests/s the router of run answers with
// pc.ThroughputConcurrency clients sending 1K-token prompts (a pool of 256,
// cycled) for one output token each, to cfg.Workers engines without latency.
func peerThroughput(ctx context.Context, cfg Config, pc PeerConfig, run peerRun) (PeerThroughput, error) {
	sc := cfg.Sim
	sc.TimeScale = 0
	sc.KVCapacityTokens = 4 << 20
	sc.MaxRunning = 4096
	f, err := startPeerFleet(ctx, pc, run, cfg.Workers, sc)
	if err != nil {
		return PeerThroughput{}, err
	}
	defer f.close()
	rng := rand.New(rand.NewPCG(7, 7))
	pool := make([][]uint32, ovhThroughputPool)
	for i := range pool {
		pool[i] = tokens(rng, ovhThroughputPrompt)
	}
	var done, failed, next atomic.Int64
	var wg sync.WaitGroup
	cpu0, err := f.router.cpu()
	if err != nil {
		return PeerThroughput{}, err
	}
	start := time.Now()
	deadline := start.Add(pc.ThroughputDuration)
	for range pc.ThroughputConcurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				p := pool[int(next.Add(1))%len(pool)]
				if _, err := f.front.generate(ctx, 0, genRequest{prompt: p, maxNew: 1, seed: requestSeed(cfg)}, func() {}); err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpu1, err := f.router.cpu()
	if err != nil {
		return PeerThroughput{}, err
	}
	if err := ctx.Err(); err != nil {
		return PeerThroughput{}, err
	}
	t := PeerThroughput{Router: run.label(), Requests: int(done.Load()), Errors: int(failed.Load())}
	t.RequestsPerSec = float64(t.Requests) / wall.Seconds()
	t.Cores = (cpu1 - cpu0).Seconds() / wall.Seconds()
	if t.Requests > 0 {
		t.CPUusPerReq = float64((cpu1 - cpu0).Microseconds()) / float64(t.Requests)
	}
	if t.Requests == 0 {
		return t, fmt.Errorf("no request succeeded (%d failed)", t.Errors)
	}
	return t, nil
}
