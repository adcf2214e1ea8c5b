package bench

// `kvgate bench --overhead --cpu`: the router's own CPU time per request,
// with the router and the engine in processes of their own.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// Input kinds of the CPU measurement, beside OverheadInputTokens and
// OverheadInputTextL1Hit.
const (
	OverheadInputTextMiss  = "text-miss"
	OverheadInputTextL0Hit = "text-l0-hit"
	// OverheadInputRelay is the floor: the token-id cases sent through
	// `kvgate relay` (internal/passthrough), which forwards each call without
	// decoding it, with its CPU per request in the router's column.
	OverheadInputRelay = "relay-floor"
)

// OverheadCPUConfig says what `kvgate bench --overhead --cpu` measures. Zero
// fields take the defaults of DefaultOverheadCPUConfig.
type OverheadCPUConfig struct {
	// Executable is the kvgate binary; the router runs as `kvgate serve`
	// and the engine as `kvgate sim`, each a child process, so that the
	// router's CPU time is its own, without the engine's or the clients'.
	Executable string
	// RouterExecutable, when set, is the binary the router (or the relay)
	// runs from instead, the engine still from Executable: another build,
	// measured against the same engine.
	RouterExecutable string
	PromptTokens     []int // prompt lengths measured; default {1024, 8192, 65536}
	Concurrency      int   // clients sending each case's requests, default 8
	// Budget is the router CPU time each case runs for (more CPU, finer
	// figures: the kernel reports a process's CPU time in 10 ms ticks);
	// default 2s. A case also stops after MaxRequests or MaxWall.
	Budget      time.Duration
	MaxRequests int           // default 200,000
	MaxWall     time.Duration // default 60s
	Warmup      int           // unmeasured requests per case first, default 200
	// ThroughputConcurrency clients send 1K-token token-id requests for
	// Duration, for the throughput figure; defaults 64 and 5s.
	ThroughputConcurrency int
	Duration              time.Duration
	// PprofAddr, when set, is the router's --pprof-addr, to profile it
	// while the cases run.
	PprofAddr string
	// RouterArgs are more flags for the router (e.g. --kv-events off, to
	// leave the KV event mirror out of the figures).
	RouterArgs []string
	// Stderr receives the child processes' logs (warnings and errors);
	// nil: discarded.
	Stderr io.Writer
}

// DefaultOverheadCPUConfig returns the configuration BENCHMARKS.md reports.
func DefaultOverheadCPUConfig() OverheadCPUConfig {
	return OverheadCPUConfig{
		PromptTokens:          []int{1024, 8192, 65536},
		Concurrency:           8,
		Budget:                2 * time.Second,
		MaxRequests:           200_000,
		MaxWall:               60 * time.Second,
		Warmup:                200,
		ThroughputConcurrency: 64,
		Duration:              5 * time.Second,
	}
}

func (c OverheadCPUConfig) withDefaults() OverheadCPUConfig {
	d := DefaultOverheadCPUConfig()
	if len(c.PromptTokens) == 0 {
		c.PromptTokens = d.PromptTokens
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Budget <= 0 {
		c.Budget = d.Budget
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = d.MaxRequests
	}
	if c.MaxWall <= 0 {
		c.MaxWall = d.MaxWall
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.ThroughputConcurrency <= 0 {
		c.ThroughputConcurrency = d.ThroughputConcurrency
	}
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	c.Stderr = sharedStderr(c.Stderr)
	return c
}

// sharedStderr is w (io.Discard when nil) behind one lock: every child
// writes its logs to it, each from a goroutine of its own (os/exec copies a
// non-file writer's output). A writer already behind one keeps it, so
// that rigs started from one configuration share one lock.
func sharedStderr(w io.Writer) io.Writer {
	switch w := w.(type) {
	case nil:
		return io.Discard
	case *lockedWriter:
		return w
	default:
		return &lockedWriter{w: w}
	}
}

// OverheadCPUReport is what RunOverheadCPU measured.
type OverheadCPUReport struct {
	Cases []OverheadCPUCase
	// IdleCPUPerSec is the router's CPU time per second with no requests
	// (health checks, load polls), counted in every case's figure.
	IdleCPUPerSec time.Duration
	// Throughput is requests/s through the router with
	// ThroughputConcurrency clients sending 1K-token token ids, and
	// ThroughputCPUus the router's CPU per request meanwhile.
	Throughput      float64
	ThroughputCPUus float64
	// ThroughputCores is the router's CPU time over the wall time of the
	// throughput run: how many cores it used.
	ThroughputCores float64
	// RelayThroughput is the same measurement through `kvgate relay`
	// instead of the router: what the machine allows any grpc-go relay.
	RelayThroughput Throughput
}

// Throughput is requests/s with many clients, and the front process's CPU
// per request and cores used meanwhile.
type Throughput struct {
	PerSec, CPUus, Cores float64
}

// OverheadCPUCase is the router's CPU time per request of one input kind at
// one prompt length.
type OverheadCPUCase struct {
	Input        string
	PromptTokens int // the engine's count of the case's first prompt
	Requests     int
	RouterCPUus  float64 // router process CPU (user + system) per request, µs
	PerSec       float64 // requests/s with Concurrency clients (engine, router and clients share the machine)
}

// RunOverheadCPU measures the router's CPU time per request and prints a
// table to w. Linux only: it reads the router's /proc/PID/stat.
func RunOverheadCPU(ctx context.Context, cfg OverheadCPUConfig, w io.Writer) (OverheadCPUReport, error) {
	cfg = cfg.withDefaults()
	var rep OverheadCPUReport
	if cfg.Executable == "" {
		return rep, errors.New("overhead --cpu: no kvgate executable to start the router and engine with")
	}
	if _, err := processCPU(os.Getpid()); err != nil {
		return rep, fmt.Errorf("overhead --cpu reads a process's CPU time from /proc: %w", err)
	}
	for _, n := range cfg.PromptTokens {
		if n < 64 {
			return rep, fmt.Errorf("overhead --cpu: prompt length %d is too short (at least 64 tokens)", n)
		}
	}

	tok, err := startCPURig(ctx, cfg, false, false)
	if err != nil {
		return rep, err
	}
	defer tok.close()
	if rep.IdleCPUPerSec, err = tok.idleCPU(ctx, time.Second); err != nil {
		return rep, err
	}
	if err := tok.tokenCases(ctx, cfg, OverheadInputTokens, &rep); err != nil {
		return rep, err
	}
	t, err := tok.throughputCPU(ctx, cfg)
	if err != nil {
		return rep, err
	}
	rep.Throughput, rep.ThroughputCPUus, rep.ThroughputCores = t.PerSec, t.CPUus, t.Cores
	tok.close()

	// The same requests through `kvgate relay`: the floor.
	floor, err := startCPURig(ctx, cfg, false, true)
	if err != nil {
		return rep, err
	}
	defer floor.close()
	if err := floor.tokenCases(ctx, cfg, OverheadInputRelay, &rep); err != nil {
		return rep, err
	}
	if rep.RelayThroughput, err = floor.throughputCPU(ctx, cfg); err != nil {
		return rep, err
	}
	floor.close()

	txt, err := startCPURig(ctx, cfg, true, false)
	if err != nil {
		return rep, err
	}
	defer txt.close()
	for _, n := range cfg.PromptTokens {
		cs, err := txt.textCases(ctx, cfg, n)
		if err != nil {
			return rep, fmt.Errorf("overhead --cpu, %d-token text: %w", n, err)
		}
		rep.Cases = append(rep.Cases, cs...)
	}
	printOverheadCPU(w, cfg, rep)
	return rep, nil
}

// cpuRig is a `kvgate sim` engine and a `kvgate serve` router in front of
// it, each a child process, and a client of the router.
type cpuRig struct {
	engine, router *exec.Cmd
	metrics        string // the router's Prometheus host:port
	conns          []*grpc.ClientConn
	client         kvgatev1.RouterClient
	direct         sglang.SglangSchedulerClient // the engine itself
	// relay is set when `kvgate relay` stands in for the router: requests
	// then go to the engine through it, as the router's adapter sends them.
	relay    sglang.SglangSchedulerClient
	ref      *textmodel.Model // the engine's tokenizer, for the text cases
	waits    sync.WaitGroup
	exited   chan struct{} // closed when a child process has exited
	exitOnce sync.Once
	seq      atomic.Uint64
	stopOnce sync.Once
}

// cpuRigKVTokens is the KV cache of a CPU rig's engine, in tokens: large
// enough that the cases of RunOverheadCPU barely fill it.
const cpuRigKVTokens = 4 << 20

// startCPURig starts the engine (the built-in ChatML tokenizer withText,
// else no tokenizer and Llama 3's vocabulary, as RunOverhead's) and the
// router (cache_aware, as `kvgate serve` defaults), or with relay `kvgate
// relay` in its place, and waits until a request goes through.
func startCPURig(ctx context.Context, cfg OverheadCPUConfig, withText, relay bool) (r *cpuRig, err error) {
	r = &cpuRig{exited: make(chan struct{})}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return r, err
	}
	enginePort, routerPort, metricsPort := ports[0], ports[1], ports[2]
	simArgs := []string{"sim", "--host", "127.0.0.1", "--port", enginePort, "--time-scale", "0",
		"--kv-capacity-tokens", strconv.Itoa(cpuRigKVTokens), "--max-running", "4096", "--max-context-length", "262144", "--log-level", "warn"}
	if !withText {
		simArgs = append(simArgs, "--tokenizer-path", "none", "--vocab-size", strconv.Itoa(overheadVocab), "--eos-token-id", strconv.Itoa(overheadEOS))
	}
	if r.engine, err = r.start(cfg, cfg.Executable, simArgs); err != nil {
		return r, err
	}
	r.metrics = "127.0.0.1:" + metricsPort
	dial := func(port string) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			return nil, fmt.Errorf("overhead --cpu: %w", err)
		}
		r.conns = append(r.conns, c)
		return c, nil
	}
	engine, err := dial(enginePort)
	if err != nil {
		return r, err
	}
	r.direct = sglang.NewSglangSchedulerClient(engine)
	// The front starts once the engine serves: the engine takes a moment
	// to listen (0.36 s with the built-in tokenizer, 0.04 s without, timed
	// on a machine running CI), and a router started
	// before then logs the engine as not connected at start (and joins it
	// later), a warning in the benchmark's output about its own rig.
	if err := r.until(ctx, "the engine", func(ctx context.Context) error { _, _, err := r.sendDirect(ctx, []uint32{1, 2, 3, 4}); return err }); err != nil {
		return r, err
	}
	frontArgs := []string{"serve", "--host", "127.0.0.1", "--port", routerPort, "--prometheus-port", metricsPort,
		"--worker-urls", "grpc://127.0.0.1:" + enginePort, "--worker-protocol", "sglang", "--policy", "cache_aware",
		"--wait-for-workers", "--worker-startup-timeout", "30s", "--log-level", "warn"}
	if cfg.PprofAddr != "" {
		frontArgs = append(frontArgs, "--pprof-addr", cfg.PprofAddr)
	}
	frontArgs = append(frontArgs, cfg.RouterArgs...)
	if relay {
		frontArgs = []string{"relay", "--host", "127.0.0.1", "--port", routerPort, "--upstream", "127.0.0.1:" + enginePort}
	}
	exe := cfg.Executable
	if cfg.RouterExecutable != "" {
		exe = cfg.RouterExecutable
	}
	if r.router, err = r.start(cfg, exe, frontArgs); err != nil {
		return r, err
	}
	front, err := dial(routerPort)
	if err != nil {
		return r, err
	}
	r.client = kvgatev1.NewRouterClient(front)
	if relay {
		r.relay = sglang.NewSglangSchedulerClient(front)
	}
	probe := ovhRouterRequest([]uint32{1, 2, 3, 4}, "")
	if err := r.until(ctx, "the router", func(ctx context.Context) error { _, _, err := r.sendRouter(ctx, probe); return err }); err != nil {
		return r, err
	}
	if withText {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		archive, err := workers.NewSGLangBackend(engine).Tokenizer(tctx)
		if err != nil {
			return r, fmt.Errorf("overhead --cpu: tokenizer from the engine: %w", err)
		}
		if r.ref, err = textmodel.FromArchive(archive, "", textmodel.Options{}); err != nil {
			return r, fmt.Errorf("overhead --cpu: tokenizer: %w", err)
		}
	}
	return r, nil
}

// until waits for what, a process just started, to serve try, for at
// most 60s, and fails at once when a child process has exited.
func (r *cpuRig) until(ctx context.Context, what string, try func(context.Context) error) error {
	err := untilServes(ctx, 60*time.Second, r.exited, try)
	switch {
	case errors.Is(err, errExited):
		return fmt.Errorf("overhead --cpu: a child process %w: waiting for %s", err, what)
	case err != nil:
		return fmt.Errorf("overhead --cpu: %s %w", what, err)
	}
	return nil
}

// start runs `exe args...` as a child, its output to cfg.Stderr.
func (r *cpuRig) start(cfg OverheadCPUConfig, exe string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = cfg.Stderr, cfg.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("overhead --cpu: start kvgate %s: %w", args[0], err)
	}
	r.waits.Go(func() {
		_ = cmd.Wait()
		r.exitOnce.Do(func() { close(r.exited) })
	})
	return cmd, nil
}

// close ends the router, then the engine, and waits for both.
func (r *cpuRig) close() {
	r.stopOnce.Do(func() {
		for _, c := range r.conns {
			_ = c.Close()
		}
		for _, c := range []*exec.Cmd{r.router, r.engine} {
			if c != nil && c.Process != nil {
				_ = c.Process.Kill()
			}
		}
		r.waits.Wait()
	})
}

func (r *cpuRig) routerCPU() (time.Duration, error) {
	d, err := processCPU(r.router.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("overhead --cpu: the router's CPU time: %w", err)
	}
	return d, nil
}

// idleCPU is the router's CPU time per second with no requests.
func (r *cpuRig) idleCPU(ctx context.Context, d time.Duration) (time.Duration, error) {
	c0, err := r.routerCPU()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := r.routerCPU()
	return time.Duration(float64(c1-c0) / d.Seconds()), err
}

func (r *cpuRig) sendDirect(ctx context.Context, ids []uint32) (time.Duration, int, error) {
	d, n, err := ovhSendEngine(ctx, r.direct, fmt.Sprintf("bench-direct-%d", r.seq.Add(1)), ids)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: %w", err)
	}
	return d, n, nil
}

// sendRouter sends req through the front process: the router, or the
// relay (its token ids, as the router's adapter would send them).
func (r *cpuRig) sendRouter(ctx context.Context, req *kvgatev1.GenerateRequest) (time.Duration, int, error) {
	if r.relay != nil {
		d, n, err := ovhSendEngine(ctx, r.relay, fmt.Sprintf("bench-%d", r.seq.Add(1)), req.GetInputIds())
		if err != nil {
			return 0, 0, fmt.Errorf("relay: %w", err)
		}
		return d, n, nil
	}
	d, n, err := ovhSendRouter(ctx, r.client, req)
	if err != nil {
		return 0, 0, fmt.Errorf("router: %w", err)
	}
	return d, n, nil
}

func (r *cpuRig) reference() *textmodel.Model { return r.ref }

// run measures one case: cfg.Warmup requests, then clients concurrent
// clients sending next(i) (called under a lock, so that it may draw from a
// math/rand source) until the router has used cfg.Budget of CPU (or
// MaxRequests, MaxWall). The router's CPU time is read once every request
// in flight has completed, so it holds their whole cost. check, when set,
// vets the router's tokenizer-cache counters (after minus before).
func (r *cpuRig) run(ctx context.Context, cfg OverheadCPUConfig, input string, clients int,
	next func(i int) *kvgatev1.GenerateRequest, check func(d cacheCounts, n int) error) (OverheadCPUCase, error) {
	c := OverheadCPUCase{Input: input}
	var (
		seq    int
		nextMu sync.Mutex
	)
	request := func() *kvgatev1.GenerateRequest {
		nextMu.Lock()
		defer nextMu.Unlock()
		seq++
		return next(seq)
	}
	for range cfg.Warmup {
		_, n, err := r.sendRouter(ctx, request())
		if err != nil {
			return c, err
		}
		if c.PromptTokens == 0 {
			c.PromptTokens = n
		}
	}
	var before cacheCounts
	if check != nil {
		var err error
		if before, err = r.cacheHits(ctx); err != nil {
			return c, err
		}
	}
	c0, err := r.routerCPU()
	if err != nil {
		return c, err
	}
	start := time.Now()
	var (
		done     atomic.Int64
		stop     atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				_, n, err := r.sendRouter(ctx, request())
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				if done.Add(1) == 1 && c.PromptTokens == 0 {
					c.PromptTokens = n
				}
			}
		})
	}
	for !stop.Load() {
		time.Sleep(20 * time.Millisecond)
		cpu, err := r.routerCPU()
		if err != nil {
			errOnce.Do(func() { firstErr = err })
			stop.Store(true)
		}
		if cpu-c0 >= cfg.Budget || done.Load() >= int64(cfg.MaxRequests) || time.Since(start) >= cfg.MaxWall || ctx.Err() != nil {
			stop.Store(true)
		}
	}
	wg.Wait()
	wall := time.Since(start)
	c1, err := r.routerCPU()
	if err = errors.Join(firstErr, err, ctx.Err()); err != nil {
		return c, err
	}
	c.Requests = int(done.Load())
	if c.Requests == 0 {
		return c, errors.New("no request completed")
	}
	c.RouterCPUus = float64(c1-c0) / float64(time.Microsecond) / float64(c.Requests)
	c.PerSec = float64(c.Requests) / wall.Seconds()
	if check != nil {
		after, err := r.cacheHits(ctx)
		if err != nil {
			return c, err
		}
		if err := check(after.minus(before), c.Requests); err != nil {
			return c, err
		}
	}
	return c, nil
}

// tokenCases measures fresh token ids at each of cfg.PromptTokens, labelled
// input; the ids are drawn from a source seeded by the length, so the
// router and the relay get the same requests.
func (r *cpuRig) tokenCases(ctx context.Context, cfg OverheadCPUConfig, input string, rep *OverheadCPUReport) error {
	for _, n := range cfg.PromptTokens {
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		c, err := r.run(ctx, cfg, input, cfg.Concurrency, func(int) *kvgatev1.GenerateRequest {
			return ovhRouterRequest(freshIDs(rng, n), "")
		}, nil)
		if err != nil {
			return fmt.Errorf("overhead --cpu, %s, %d tokens: %w", input, n, err)
		}
		rep.Cases = append(rep.Cases, c)
	}
	return nil
}

// throughputCPU runs the throughput measurement: 1K-token token ids from
// cfg.ThroughputConcurrency clients for cfg.Duration.
func (r *cpuRig) throughputCPU(ctx context.Context, cfg OverheadCPUConfig) (Throughput, error) {
	rng := rand.New(rand.NewPCG(7, 7))
	reqs := make([]*kvgatev1.GenerateRequest, ovhThroughputPool)
	for i := range reqs {
		reqs[i] = ovhRouterRequest(freshIDs(rng, ovhThroughputPrompt), "")
	}
	tc := cfg
	tc.Budget, tc.MaxRequests, tc.MaxWall = time.Duration(1<<62), 1<<62, cfg.Duration
	c, err := r.run(ctx, tc, OverheadInputTokens, cfg.ThroughputConcurrency, func(i int) *kvgatev1.GenerateRequest {
		return reqs[i%len(reqs)]
	}, nil)
	if err != nil {
		return Throughput{}, fmt.Errorf("overhead --cpu, throughput: %w", err)
	}
	return Throughput{PerSec: c.PerSec, CPUus: c.RouterCPUus, Cores: c.RouterCPUus * c.PerSec / 1e6}, nil
}

func printOverheadCPU(w io.Writer, cfg OverheadCPUConfig, rep OverheadCPUReport) {
	fmt.Fprintf(w, "Router CPU per request: the router (kvgate serve, cache_aware) and one simulated SGLang engine at zero latency (kvgate sim) are processes of their own; CPU is the router process's user + system time (/proc/PID/stat) over the requests it served (max_new_tokens 1, streamed).\n")
	if len(cfg.RouterArgs) > 0 {
		fmt.Fprintf(w, "Router flags added: %s.\n", strings.Join(cfg.RouterArgs, " "))
	}
	fmt.Fprintf(w, "%d clients per case, after %d warm-up requests, until the router used %s of CPU (at most %d requests or %s). %d CPUs, %s/%s. Idle router: %.1f ms of CPU per second (counted in the figures).\n\n",
		cfg.Concurrency, cfg.Warmup, cfg.Budget, cfg.MaxRequests, cfg.MaxWall, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		float64(rep.IdleCPUPerSec)/float64(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "input\tprompt tokens\trequests\trouter CPU µs/request\trequests/s\t")
	for _, c := range rep.Cases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.0f\t\n", c.Input, c.PromptTokens, c.Requests, c.RouterCPUus, c.PerSec)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntokens: fresh random token ids. relay-floor: the same ids through kvgate relay instead of the router, a transparent gRPC relay that forwards each message undecoded: what any grpc-go router pays per request. text-miss: a new text each request (a unique first line, no special tokens): L0 and L1 miss. text-l0-hit: the same text each request. text-l1-hit: a ChatML conversation whose prefix up to its last special token is cached; only the last user turn changes.\n")
	fmt.Fprintf(w, "\nThroughput, %d clients sending %d-token token-id requests for %s: %.0f requests/s through the router, at %.1f µs of router CPU per request (the router used %.2f cores; engine, router and clients share this machine).\n",
		cfg.ThroughputConcurrency, ovhThroughputPrompt, cfg.Duration, rep.Throughput, rep.ThroughputCPUus, rep.ThroughputCores)
	fmt.Fprintf(w, "The same through kvgate relay: %.0f requests/s, at %.1f µs of relay CPU per request (%.2f cores).\n",
		rep.RelayThroughput.PerSec, rep.RelayThroughput.CPUus, rep.RelayThroughput.Cores)
}
