package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// serveConfig is everything `kvgate serve` is told on its command line.
type serveConfig struct {
	host, promHost       string
	port, promPort       int
	workerURLs           listFlag
	workerProtocol       string
	policy               string
	healthInterval       time.Duration
	healthTimeout        time.Duration
	healthFailures       int
	healthSuccesses      int
	loadPollInterval     time.Duration
	startupTimeout       time.Duration
	shutdownTimeout      time.Duration
	logLevel             string
	logJSON              bool
	embeddedWorkers      int
	embeddedProtocol     string
	embeddedTimeScale    float64
	embeddedKVCapacity   int
	embeddedPrefillSpeed float64
	text                 textFlags
	routing              policyFlags
	pdMode               bool
	decodeURLs           listFlag
	prefillPolicy        string
	decodePolicy         string
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to serve gRPC on")
	fs.IntVar(&c.port, "port", 30000, "port to serve gRPC on (0: any free port)")
	fs.Var(&c.workerURLs, "worker-urls", "engine workers, grpc://host:port or host:port; several values space-separated, comma-separated or repeated. Empty: start simulated engines in-process (see --embedded-*)")
	fs.StringVar(&c.workerProtocol, "worker-protocol", "auto", "protocol of every worker: sglang, vllm, or auto (ask each engine)")
	fs.StringVar(&c.policy, "policy", "cache_aware", "routing policy: "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&c.promHost, "prometheus-host", "127.0.0.1", "address to serve Prometheus metrics on")
	fs.IntVar(&c.promPort, "prometheus-port", 29000, "port to serve Prometheus metrics on, path /metrics (-1: disabled, 0: any free port)")
	fs.DurationVar(&c.healthInterval, "health-check-interval", 10*time.Second, "time between health checks of each worker")
	fs.DurationVar(&c.healthTimeout, "health-check-timeout", 5*time.Second, "how long a health check may take before it counts as failed")
	fs.IntVar(&c.healthFailures, "health-failure-threshold", 3, "consecutive failed health checks that mark a worker unhealthy")
	fs.IntVar(&c.healthSuccesses, "health-success-threshold", 2, "consecutive passed health checks that mark an unhealthy worker healthy again")
	fs.DurationVar(&c.loadPollInterval, "load-poll-interval", time.Second, "time between GetLoads polls of each worker")
	fs.DurationVar(&c.startupTimeout, "worker-startup-timeout", 60*time.Second, "how long to keep trying to reach each worker at start-up before giving up")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running requests may take to finish")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.IntVar(&c.embeddedWorkers, "embedded-workers", 2, "without --worker-urls: how many simulated engines to start in-process")
	fs.StringVar(&c.embeddedProtocol, "embedded-protocol", "sglang", "without --worker-urls: protocol the simulated engines speak (sglang or vllm)")
	fs.Float64Var(&c.embeddedTimeScale, "embedded-time-scale", 1, "without --worker-urls: multiplies the simulated engines' delays (0: no delays)")
	fs.IntVar(&c.embeddedKVCapacity, "embedded-kv-capacity-tokens", 0, "without --worker-urls: KV cache size of each simulated engine in tokens (0: the simulator's default)")
	fs.Float64Var(&c.embeddedPrefillSpeed, "embedded-prefill-tokens-per-sec", 0, "without --worker-urls: prefill speed of each simulated engine (0: the simulator's default)")
	c.text.register(fs)
	c.routing.register(fs)
	fs.BoolVar(&c.pdMode, "pd-disaggregation", false, "prefill/decode disaggregation: --worker-urls are prefill workers (each may end in @BOOTSTRAP_PORT, e.g. grpc://p1:31000@8998), --decode the decode workers")
	fs.Var(&c.decodeURLs, "decode", "with --pd-disaggregation: decode workers; several values space-separated, comma-separated or repeated")
	fs.StringVar(&c.prefillPolicy, "prefill-policy", "cache_aware", "with --pd-disaggregation: policy choosing the prefill worker")
	fs.StringVar(&c.decodePolicy, "decode-policy", "power_of_two", "with --pd-disaggregation: policy choosing the decode worker")
}

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("kvgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.register(fs)
	if err := fs.Parse(joinMultiValues(args, "worker-urls", "decode")); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	log, err := newLogger(stderr, cfg.logLevel, cfg.logJSON)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, log, nil)
}

// serve runs the router until ctx ends. ready, when not nil, is called with the
// gRPC and metrics addresses once both accept connections.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, ready func(grpcAddr, metricsAddr string)) error {
	proto, err := workers.ParseProtocol(cfg.workerProtocol)
	if err != nil {
		return err
	}
	for _, name := range []string{cfg.policy, cfg.prefillPolicy, cfg.decodePolicy} {
		if !slices.Contains(policy.Names(), name) {
			return fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(policy.Names(), ", "))
		}
	}
	if !cfg.pdMode && len(cfg.decodeURLs) > 0 {
		return errors.New("--decode needs --pd-disaggregation")
	}

	groups, bootstrapPorts, stopSims, err := workerGroups(cfg, log)
	if err != nil {
		return err
	}
	defer stopSims()
	reg := workers.NewRegistry()
	defer reg.Close()
	for _, g := range groups {
		if err := connectAll(ctx, reg, g.urls, workers.ConnectOptions{Protocol: proto, Role: g.role}, cfg.startupTimeout, log); err != nil {
			return err
		}
	}

	var (
		pol        policy.Policy
		runners    []policy.Runner
		dispatcher *pd.Dispatcher
	)
	newPolicy := func(name string, role workers.Role) (policy.Policy, error) {
		p, err := policy.New(name, cfg.routing.options(reg.WithRole(role)))
		if r, ok := p.(policy.Runner); ok {
			runners = append(runners, r)
		}
		return p, err
	}
	if cfg.pdMode {
		if pol, err = newPolicy(cfg.prefillPolicy, workers.RolePrefill); err != nil {
			return err
		}
		dec, err := newPolicy(cfg.decodePolicy, workers.RoleDecode)
		if err != nil {
			return err
		}
		dispatcher = pd.New(pd.Config{Prefill: pol, Decode: dec, BootstrapPorts: bootstrapPorts})
	} else if pol, err = newPolicy(cfg.policy, workers.RoleRegular); err != nil {
		return err
	}
	text, err := loadText(ctx, cfg.text, reg, log)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Registry: reg, Policy: pol, Logger: log, Text: text, PD: dispatcher})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("listen for gRPC: %w", err)
	}

	var metricsSrv *http.Server
	metricsAddr := ""
	if cfg.promPort >= 0 {
		mlis, err := net.Listen("tcp", net.JoinHostPort(cfg.promHost, strconv.Itoa(cfg.promPort)))
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen for Prometheus: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(srv.Metrics().Registry, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		metricsAddr = mlis.Addr().String()
		go func() {
			if err := metricsSrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "error", err)
			}
		}()
	}

	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Run(bg)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		workers.RunHealthChecks(bg, reg, workers.HealthConfig{
			Interval:         cfg.healthInterval,
			Timeout:          cfg.healthTimeout,
			FailureThreshold: cfg.healthFailures,
			SuccessThreshold: cfg.healthSuccesses,
			OnChange:         func(*workers.Worker, bool) { srv.UpdateHealth() },
		}, log)
	}()
	go func() {
		defer wg.Done()
		workers.RunLoadPolls(bg, reg, cfg.loadPollInterval, log)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	log.Info("kvgate serving", "grpc", lis.Addr().String(), "metrics", metricsAddr, "policy", pol.Name(), "pd", cfg.pdMode, "workers", len(reg.Snapshot()))
	if ready != nil {
		ready(lis.Addr().String(), metricsAddr)
	}

	select {
	case <-ctx.Done():
		err = nil
	case err = <-serveErr:
	}
	log.Info("kvgate shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	srv.Stop(sctx)
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	stopBG()
	wg.Wait()
	return err
}

// workerGroup is a list of worker URLs that share a role.
type workerGroup struct {
	role workers.Role
	urls []string
}

// workerGroups reads the worker flags: regular workers, or with
// --pd-disaggregation prefill workers (with their bootstrap ports) and decode
// workers. With none given it starts simulated engines; stop ends them.
func workerGroups(cfg serveConfig, log *slog.Logger) (groups []workerGroup, ports map[string]int, stop func(), err error) {
	stop = func() {}
	urls := []string(cfg.workerURLs)
	if !cfg.pdMode {
		if len(urls) == 0 {
			sims, err := startEmbedded(cfg, sim.RoleRegular, log)
			if err != nil {
				return nil, nil, stop, err
			}
			stop, urls = stopAll(sims), simURLs(sims)
		}
		return []workerGroup{{workers.RoleRegular, urls}}, nil, stop, nil
	}
	decodes := []string(cfg.decodeURLs)
	switch {
	case len(urls) == 0 && len(decodes) == 0:
		prefill, err := startEmbedded(cfg, sim.RolePrefill, log)
		if err != nil {
			return nil, nil, stop, err
		}
		decode, err := startEmbedded(cfg, sim.RoleDecode, log)
		if err != nil {
			stopAll(prefill)()
			return nil, nil, stop, err
		}
		stop = stopAll(append(prefill, decode...))
		urls, decodes = simURLs(prefill), simURLs(decode)
	case len(urls) == 0 || len(decodes) == 0:
		return nil, nil, stop, errors.New("--pd-disaggregation needs prefill workers (--worker-urls) and decode workers (--decode), or neither (simulated engines)")
	}
	ports = map[string]int{}
	prefills := make([]string, len(urls))
	for i, u := range urls {
		url, port, err := pd.ParsePrefillURL(u)
		if err != nil {
			stop()
			return nil, nil, func() {}, err
		}
		prefills[i] = url
		if port > 0 {
			ports[url] = port
		}
	}
	return []workerGroup{{workers.RolePrefill, prefills}, {workers.RoleDecode, decodes}}, ports, stop, nil
}

func simURLs(sims []*sim.Server) []string {
	var out []string
	for _, s := range sims {
		out = append(out, "grpc://"+s.Addr())
	}
	return out
}

func stopAll(sims []*sim.Server) func() {
	return func() {
		for _, s := range sims {
			s.Stop()
		}
	}
}

// startEmbedded starts the simulated engines used when no worker is given.
func startEmbedded(cfg serveConfig, role string, log *slog.Logger) ([]*sim.Server, error) {
	if cfg.embeddedWorkers < 1 {
		return nil, fmt.Errorf("--embedded-workers is %d; at least 1 is needed when --worker-urls is empty", cfg.embeddedWorkers)
	}
	var sims []*sim.Server
	for i := range cfg.embeddedWorkers {
		sc := sim.DefaultConfig()
		sc.Protocol = cfg.embeddedProtocol
		sc.Role = role
		sc.TimeScale = cfg.embeddedTimeScale
		sc.Seed = int64(i)
		if cfg.embeddedKVCapacity > 0 {
			sc.KVCapacityTokens = cfg.embeddedKVCapacity
		}
		if cfg.embeddedPrefillSpeed > 0 {
			sc.PrefillTokensPerSec = cfg.embeddedPrefillSpeed
		}
		s, err := sim.Start(sc, "127.0.0.1:0")
		if err != nil {
			for _, x := range sims {
				x.Stop()
			}
			return nil, fmt.Errorf("start simulated engine %d: %w", i, err)
		}
		log.Info("simulated engine started", "address", s.Addr(), "protocol", sc.Protocol, "role", role)
		sims = append(sims, s)
	}
	return sims, nil
}

// connectAll connects to every worker concurrently, retrying each until it
// answers or the start-up timeout passes: engines often start after the router.
func connectAll(ctx context.Context, reg *workers.Registry, urls []string, opts workers.ConnectOptions, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ws := make([]*workers.Worker, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[i], errs[i] = connectWithRetry(ctx, u, opts, log)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range ws {
			if w != nil {
				w.Close()
			}
		}
		return err
	}
	for _, w := range ws {
		if err := reg.Add(w); err != nil {
			return err
		}
		info := w.Info()
		log.Info("worker registered", "worker", w.URL(), "protocol", w.Protocol().String(), "model", info.Model,
			"vocab_size", info.VocabSize, "max_context", info.MaxContextLength, "page_size", info.PageSize)
	}
	return nil
}

func connectWithRetry(ctx context.Context, url string, opts workers.ConnectOptions, log *slog.Logger) (*workers.Worker, error) {
	if _, _, err := workers.ParseAddress(url); err != nil {
		return nil, err // no point retrying a malformed address
	}
	for attempt := 1; ; attempt++ {
		w, err := workers.Connect(ctx, url, opts)
		if err == nil {
			return w, nil
		}
		log.Warn("worker not ready", "worker", url, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("worker %s: not reachable before the start-up timeout: %w", url, err)
		case <-time.After(time.Second):
		}
	}
}

func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
