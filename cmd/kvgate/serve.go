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
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/answer"
	"github.com/kvgate/kvgate/internal/logging"
	"github.com/kvgate/kvgate/internal/tlsfiles"
	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/tokenize/hub"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// serveConfig is everything `kvgate serve` is told on its command line.
type serveConfig struct {
	host, promHost       string
	pprofAddr            string // empty: no pprof endpoint
	port, promPort       int
	workerURLs           listFlag
	workerProtocol       string
	dpAware              bool
	policy               string
	healthInterval       time.Duration
	healthTimeout        time.Duration
	healthFailures       int
	healthSuccesses      int
	healthProbe          healthProbeFlag
	loadPollInterval     time.Duration
	startupTimeout       time.Duration
	waitForWorkers       bool
	kvEvents             sim.OnOff
	kvEventsZMQ          listFlag
	drainTimeoutSecs     float64
	workerTLS            struct{ ca, cert, key string }
	tls                  struct{ cert, key, clientCA string }
	apiKey, adminAPIKey  string // resolved from the two below (resolveKeys)
	apiKeySrc            secret
	adminAPIKeySrc       secret
	adminPort            int
	adminHost            string
	maxWorkers           int
	adminWorkerAllow     listFlag
	shutdownTimeout      time.Duration
	logLevel             string
	logJSON              bool
	otlpEndpoint         string
	otlpSamplingRatio    float64
	embeddedWorkers      int
	embeddedProtocol     string
	embeddedTimeScale    float64
	embeddedKVCapacity   int
	embeddedPrefillSpeed float64
	embeddedReply        string
	text                 textFlags
	routing              policyFlags
	reliability          reliabilityFlags
	admission            admissionFlags
	pdMode               bool
	igw                  bool
	decodeURLs           listFlag
	prefillPolicy        string
	decodePolicy         string
	discovery            discoveryFlags
	http                 httpFlags
	// cmdline is the command line /debug/pprof/cmdline shows (redacted);
	// nil: os.Args.
	cmdline []string
	// modelConfig is --model-config; modelEntries are its models, read
	// by serve before the paths are resolved.
	modelConfig  string
	modelEntries map[string]modelEntry
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to serve gRPC on")
	fs.IntVar(&c.port, "port", 30000, "port to serve gRPC on (0: any free port)")
	fs.Var(&c.workerURLs, "worker-urls", "engine workers, grpc://host:port or host:port; several values space-separated, comma-separated or repeated. Empty: start simulated engines in-process (see --embedded-*)")
	fs.StringVar(&c.workerProtocol, "worker-protocol", "auto", "protocol of every worker: sglang, vllm, trtllm (TensorRT-LLM), or auto (ask each engine)")
	fs.BoolVar(&c.dpAware, "dp-aware", false, "route to each data-parallel rank of an engine as a worker of its own, named url@rank (engines reporting a data-parallel size above 1); without it an engine's ranks are one worker and the engine places each request")
	fs.StringVar(&c.policy, "policy", "cache_aware", "routing policy: "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's pprof profiles at http://ADDR/debug/pprof/ for profiling in production; loopback only (127.0.0.1:PORT, [::1]:PORT or localhost:PORT), since it has no authentication (empty: off)")
	fs.StringVar(&c.promHost, "prometheus-host", "127.0.0.1", "address to serve Prometheus metrics on")
	fs.IntVar(&c.promPort, "prometheus-port", 29000, "port to serve Prometheus metrics on, path /metrics (-1: disabled, 0: any free port)")
	fs.DurationVar(&c.healthInterval, "health-check-interval", 10*time.Second, "time between health checks of each worker")
	fs.DurationVar(&c.healthTimeout, "health-check-timeout", 5*time.Second, "how long a health check may take before it counts as failed; also how long a GetLoads poll may take")
	fs.IntVar(&c.healthFailures, "health-failure-threshold", 3, "consecutive failed health checks that mark a worker unhealthy")
	fs.IntVar(&c.healthSuccesses, "health-success-threshold", 2, "consecutive passed health checks that mark an unhealthy worker healthy again")
	fs.Var(&c.healthProbe, "health-check", healthCheckUsage)
	fs.DurationVar(&c.loadPollInterval, "load-poll-interval", time.Second, "time between GetLoads polls of each worker (a worker whose last poll is still under way is not asked again meanwhile)")
	c.kvEvents = true
	fs.Var(&c.kvEventsZMQ, "kv-events-zmq", "workers whose engine publishes its KV events over ZMQ (vLLM's --kv-events-config publisher zmq) rather than SubscribeKvEvents: WORKER=tcp://host:port[?replay=tcp://host:port&topic=T&bind=true], WORKER as --worker-urls names it; tcp://*:port or bind=true binds, for publishers that connect. Several values comma-separated or repeated")
	fs.Var(&c.kvEvents, "kv-events", "on: subscribe to every worker's KV cache events when the policy mirrors the engines' caches (cache_aware, vllm_cache_aware), so its view is exact; workers without events stay approximate. off: approximate for all")
	fs.BoolVar(&c.waitForWorkers, "wait-for-workers", false, "at start-up, wait until at least one worker answers (up to --worker-startup-timeout) and fail if none does; without it kvgate starts at once and workers that do not answer yet join when they do")
	fs.DurationVar(&c.startupTimeout, "worker-startup-timeout", 60*time.Second, "with --wait-for-workers: how long to wait for a worker to answer")
	fs.Float64Var(&c.drainTimeoutSecs, "worker-drain-timeout-secs", 30, "Admin.RemoveWorker: how long a removed worker's requests may take to finish when the call gives no timeout")
	fs.StringVar(&c.workerTLS.ca, "worker-tls-ca-file", "", "grpcs:// workers: PEM file of the CAs to trust (empty: the system's)")
	fs.StringVar(&c.workerTLS.cert, "worker-tls-cert-file", "", "grpcs:// workers: client certificate (PEM) for mutual TLS, with --worker-tls-key-file")
	fs.StringVar(&c.workerTLS.key, "worker-tls-key-file", "", "grpcs:// workers: the client certificate's private key (PEM)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running requests may take to finish")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "export OpenTelemetry traces over OTLP/gRPC to this collector host:port, in plaintext unless OTEL_EXPORTER_OTLP_INSECURE=false (empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; with none of them tracing is off)")
	fs.Float64Var(&c.otlpSamplingRatio, "otlp-sampling-ratio", 1, "share of new traces recorded, 0 to 1; a request carrying a traceparent follows its caller's sampling decision")
	fs.IntVar(&c.embeddedWorkers, "embedded-workers", 2, "without --worker-urls: how many simulated engines to start in-process")
	fs.StringVar(&c.embeddedProtocol, "embedded-protocol", "sglang", "without --worker-urls: protocol the simulated engines speak (sglang, vllm or trtllm)")
	fs.Float64Var(&c.embeddedTimeScale, "embedded-time-scale", 1, "without --worker-urls: multiplies the simulated engines' delays (0: no delays)")
	fs.IntVar(&c.embeddedKVCapacity, "embedded-kv-capacity-tokens", 0, "without --worker-urls: KV cache size of each simulated engine in tokens (0: the simulator's default)")
	fs.Float64Var(&c.embeddedPrefillSpeed, "embedded-prefill-tokens-per-sec", 0, "without --worker-urls: prefill speed of each simulated engine (0: the simulator's default)")
	fs.StringVar(&c.embeddedReply, "embedded-reply", sim.ReplyEcho, `without --worker-urls: how the simulated engines answer, "echo" (the last user message; the same prompt, the same answer) or "random" (sampled token ids, as kvgate sim and bench)`)
	fs.StringVar(&c.tls.cert, "tls-cert-file", "", "serve TLS with this certificate (PEM, with any intermediates); reloaded when the file changes and on SIGHUP")
	fs.StringVar(&c.tls.key, "tls-key-file", "", "the TLS certificate's private key (PEM)")
	fs.StringVar(&c.tls.clientCA, "tls-client-ca-file", "", "require client certificates signed by these CAs (PEM): mutual TLS")
	fs.StringVar(&c.apiKeySrc.value, "api-key", "", "require 'authorization: Bearer KEY' for the Router service (default: $KVGATE_API_KEY; empty: open). Also opens Admin when --admin-api-key is empty. Prefer --api-key-file or the environment: a command line is visible to other users of the host")
	fs.StringVar(&c.apiKeySrc.file, "api-key-file", "", "read --api-key from this file (surrounding white space trimmed), e.g. a mounted Kubernetes Secret")
	fs.StringVar(&c.adminAPIKeySrc.value, "admin-api-key", "", "require 'authorization: Bearer KEY' for the Admin service; the Router key then does not open it (default: $KVGATE_ADMIN_API_KEY)")
	fs.StringVar(&c.adminAPIKeySrc.file, "admin-api-key-file", "", "read --admin-api-key from this file (surrounding white space trimmed)")
	fs.IntVar(&c.adminPort, "admin-port", -1, "serve the Admin service on a listener of its own on this port instead of beside Router (-1: beside Router; 0: any free port)")
	fs.StringVar(&c.adminHost, "admin-host", "127.0.0.1", "with --admin-port: the address to serve Admin on (loopback unless set). Admin is served on a non-loopback address only with --admin-api-key: kvgate refuses to start otherwise")
	fs.IntVar(&c.maxWorkers, "max-workers", router.DefaultMaxWorkers, "most engines the fleet may have: Admin.AddWorker (RESOURCE_EXHAUSTED) and service discovery add none beyond it")
	fs.Var(&c.adminWorkerAllow, "admin-worker-allow", "hosts Admin.AddWorker may connect to: IPs, IP prefixes (10.0.0.0/8), host names, *.domain, or * for any; several values space-separated, comma-separated or repeated (default: the hosts of --worker-urls and --decode)")
	c.text.register(fs)
	c.routing.register(fs)
	c.reliability.register(fs)
	c.admission.register(fs)
	fs.BoolVar(&c.igw, "enable-igw", false, "serve several models behind one router (IGW): workers are grouped by the model they report, each model has its own policies, tree, tokenizer and chat template, and requests choose one with their model field")
	fs.StringVar(&c.modelConfig, "model-config", "", "with --enable-igw: a YAML or JSON file giving models their own policy, cache and balance thresholds, model path, tokenizer and chat template, by name; what a model leaves out the flags give")
	fs.BoolVar(&c.pdMode, "pd-disaggregation", false, "prefill/decode disaggregation: --worker-urls are prefill workers (each may end in @BOOTSTRAP_PORT, e.g. grpc://p1:31000@8998), --decode the decode workers")
	fs.Var(&c.decodeURLs, "decode", "with --pd-disaggregation: decode workers; several values space-separated, comma-separated or repeated")
	fs.StringVar(&c.prefillPolicy, "prefill-policy", "cache_aware", "with --pd-disaggregation: policy choosing the prefill worker")
	fs.StringVar(&c.decodePolicy, "decode-policy", "power_of_two", "with --pd-disaggregation: policy choosing the decode worker")
	c.discovery.register(fs)
	c.http.register(fs)
}

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("kvgate serve", flag.ContinueOnError)
	cfg.register(fs)
	if err := parseFlags(fs, joinMultiValues(args, multiValueFlags...), "serve", stderr); err != nil {
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

// listening are the addresses serve listens on; admin is empty when Admin
// is served on the gRPC port, metrics when metrics are off, pprof without
// --pprof-addr.
type listening struct{ grpc, metrics, admin, pprof, http string }

// serve runs the router until ctx ends. ready, when not nil, is called with
// the addresses once they accept connections.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, ready func(listening)) error {
	if err := cfg.resolveKeys(os.Getenv); err != nil {
		return err
	}
	adminHost := cfg.host
	if cfg.adminPort >= 0 {
		adminHost = cfg.adminHost
	}
	if err := cfg.adminExposure(adminHost); err != nil {
		return err
	}
	if err := cfg.readModelConfig(); err != nil {
		return err
	}
	src, err := cfg.text.resolve(ctx, hub.FromEnv(os.Getenv), log)
	if err != nil {
		return err
	}
	cfg.text.src = src
	gcfg, stopSims, err := cfg.routerConfig(log)
	if err != nil {
		return err
	}
	var certs *tlsfiles.Certificates
	if cfg.tls.cert != "" || cfg.tls.key != "" || cfg.tls.clientCA != "" {
		if cfg.tls.cert == "" || cfg.tls.key == "" {
			stopSims()
			return errors.New("TLS needs both --tls-cert-file and --tls-key-file (--tls-client-ca-file adds mutual TLS)")
		}
		certs, err = tlsfiles.New(tlsfiles.Config{CertFile: cfg.tls.cert, KeyFile: cfg.tls.key, ClientCAFile: cfg.tls.clientCA, Logger: log})
		if err != nil {
			stopSims()
			return fmt.Errorf("TLS: %w", err)
		}
		gcfg.Credentials = credentials.NewTLS(certs.TLSConfig())
	}
	gcfg.SeparateAdmin = cfg.adminPort >= 0
	front := newHTTPFront(cfg.http, cfg.admission, gcfg.SeparateAdmin, log)
	gcfg.Credentials = front.credentials(gcfg.Credentials)
	defer stopSims()
	mod, _ := buildVersion() // the traces' service.version
	traces, err := tracing.Setup(ctx, tracing.Options{Endpoint: cfg.otlpEndpoint, SamplingRatio: cfg.otlpSamplingRatio, ServiceVersion: mod})
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: the router's shutdown ends the
	// requests, then the spans still buffered are flushed.
	defer flushTraces(ctx, log, traces)
	if traces.Enabled {
		gcfg.TracerProvider = traces.TracerProvider
	}
	g, err := router.New(ctx, gcfg)
	if err != nil {
		return err
	}
	defer g.Close()
	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("listen for gRPC: %w", err)
	}
	if err := cfg.adminListenerExposure(lis.Addr()); cfg.adminPort < 0 && err != nil {
		lis.Close()
		return err
	}

	var pprofSrv *http.Server
	pprofAddr := ""
	if cfg.pprofAddr != "" {
		plis, err := listenPprof(cfg.pprofAddr)
		if err != nil {
			lis.Close()
			return err
		}
		cmdline := cfg.cmdline
		if cmdline == nil {
			cmdline = os.Args
		}
		pprofSrv, pprofAddr = servePprof(plis, cmdline, log), plis.Addr().String()
		defer pprofSrv.Close()
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
		mux.Handle("/metrics", promhttp.HandlerFor(g.Server.Metrics().Registry, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		metricsAddr = mlis.Addr().String()
		go func() {
			if err := metricsSrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "error", err)
			}
		}()
	}

	// SIGHUP reloads what can be reloaded and never stops the router (its
	// default action would kill the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	defer func() {
		signal.Stop(hup)
		close(hupDone)
	}()
	go func() {
		for {
			select {
			case <-hup:
				reload(log, certs)
			case <-hupDone:
				return
			}
		}
	}()

	serveErr := make(chan error, 5)
	go func() { serveErr <- g.Serve(lis) }()
	adminAddr := ""
	if cfg.adminPort >= 0 {
		alis, err := net.Listen("tcp", net.JoinHostPort(cfg.adminHost, strconv.Itoa(cfg.adminPort)))
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen for Admin: %w", err)
		}
		if err := cfg.adminListenerExposure(alis.Addr()); err != nil {
			alis.Close()
			lis.Close()
			return err
		}
		adminAddr = alis.Addr().String()
		go func() { serveErr <- g.ServeAdmin(alis) }()
	}
	if err := front.start(cfg.host, g, certs, serveErr); err != nil {
		lis.Close()
		return err
	}
	log.Info("kvgate serving", "grpc", lis.Addr().String(), "http", front.address(), "metrics", metricsAddr, "policy", cfg.policy, "igw", cfg.igw, "pd", cfg.pdMode, "workers", len(g.Registry.Snapshot()),
		"admin", adminAddr, "pprof", pprofAddr, "tls", certs != nil, "mutual_tls", cfg.tls.clientCA != "",
		"api_key", gcfg.Auth.APIKey != "", "admin_api_key", gcfg.Auth.AdminAPIKey != "", "tracing", traces.Enabled)
	if ready != nil {
		ready(listening{grpc: lis.Addr().String(), metrics: metricsAddr, admin: adminAddr, pprof: pprofAddr, http: front.address()})
	}

	select {
	case <-ctx.Done():
		err = nil
	case err = <-serveErr:
	}
	log.Info("kvgate shutting down", "drain", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	frontDone := make(chan struct{})
	go func() { front.shutdown(sctx); close(frontDone) }()
	g.Shutdown(sctx)
	<-frontDone
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	return err
}

// reload re-reads what the router can change while it runs, on SIGHUP: the
// TLS certificate, key and client CAs (also picked up by themselves when the
// files change). A reload that fails keeps the previous certificates.
func reload(log *slog.Logger, certs *tlsfiles.Certificates) {
	if certs == nil {
		log.Info("SIGHUP: nothing to reload (no TLS files configured)")
		return
	}
	if err := certs.Reload(); err != nil {
		log.Error("SIGHUP: TLS files not reloaded; the previous certificates stay in use", "error", err)
		return
	}
	log.Info("SIGHUP: TLS files reloaded")
}

// routerConfig turns the command line into the router's configuration, starting
// the simulated engines when no worker is given; stop ends them.
func (c serveConfig) routerConfig(log *slog.Logger) (router.Config, func(), error) {
	g := router.DefaultConfig()
	proto, err := workers.ParseProtocol(c.workerProtocol)
	if err != nil {
		return g, func() {}, err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--health-check-interval", c.healthInterval}, {"--health-check-timeout", c.healthTimeout}, {"--load-poll-interval", c.loadPollInterval}} {
		if d.v <= 0 {
			return g, func() {}, fmt.Errorf("%s is %v; it must be > 0", d.flag, d.v)
		}
	}
	if err := c.routing.validate(); err != nil {
		return g, func() {}, err
	}
	if c.healthFailures < 1 || c.healthSuccesses < 1 {
		return g, func() {}, fmt.Errorf("--health-failure-threshold (%d) and --health-success-threshold (%d) must be ≥ 1", c.healthFailures, c.healthSuccesses)
	}
	for _, name := range []string{c.policy, c.prefillPolicy, c.decodePolicy} {
		if !slices.Contains(policy.Names(), name) {
			return g, func() {}, fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(policy.Names(), ", "))
		}
	}
	if !c.pdMode && len(c.decodeURLs) > 0 {
		return g, func() {}, errors.New("--decode needs --pd-disaggregation")
	}
	if g.Discovery, err = c.discovery.config(c.pdMode, log); err != nil {
		return g, func() {}, err
	}
	groups, stop, err := workerGroups(c, log)
	if err != nil {
		return g, stop, err
	}
	g.WorkerURLs = groups[0].urls
	if c.pdMode {
		g.PD, g.DecodeURLs = true, groups[1].urls
	}
	g.Protocol = proto
	g.DPAware = c.dpAware
	g.Policy, g.PrefillPolicy, g.DecodePolicy = c.policy, c.prefillPolicy, c.decodePolicy
	g.Options = c.routing.options()
	g.LearnBlockSize = c.routing.blockSize == 0
	g.LearnVllmBlockSize = !c.routing.given("vllm-block-size")
	g.TextSources, g.TextOptions, g.FetchTimeout = c.text.src, c.text.options(), c.text.fetchTimeout
	if err := answer.ValidateReasoningParser(c.text.reasoningParser); err != nil {
		return g, func() {}, fmt.Errorf("--reasoning-parser: %w", err)
	}
	g.ReasoningParser = c.text.reasoningParser
	if err := answer.ValidateToolCallParser(c.text.toolCallParser); err != nil {
		return g, func() {}, fmt.Errorf("--tool-call-parser: %w", err)
	}
	g.ToolCallParser = c.text.toolCallParser
	// As in SMG, service discovery serves every model its pods run.
	g.IGW = c.igw || c.discovery.enabled
	if g.ModelTexts, err = c.text.models.sources(g.IGW, c.text.src); err != nil {
		return g, stop, err
	}
	applyModelFile(&g, c.modelEntries, c.text.src)
	g.Health = workers.HealthConfig{
		Interval:         c.healthInterval,
		Timeout:          c.healthTimeout,
		FailureThreshold: c.healthFailures,
		SuccessThreshold: c.healthSuccesses,
		Probe:            workers.HealthProbe(c.healthProbe),
	}
	g.LoadPollInterval = c.loadPollInterval
	g.KVEvents = bool(c.kvEvents)
	if g.KVSubscription.Sources, err = zmqSources(c.kvEventsZMQ); err != nil {
		return g, stop, err
	}
	g.StartupTimeout = c.startupTimeout
	g.WaitForWorkers = c.waitForWorkers
	g.DrainTimeout = time.Duration(c.drainTimeoutSecs * float64(time.Second))
	g.Breaker = c.reliability.breaker()
	if t := c.workerTLS; t.ca != "" || t.cert != "" || t.key != "" {
		if g.WorkerTLS, err = workers.ClientTLSConfig(t.ca, t.cert, t.key); err != nil {
			return g, stop, fmt.Errorf("worker TLS: %w", err)
		}
	}
	g.Reliability = c.reliability.config()
	g.Admission = c.admission.config()
	g.MaxRequestBytes = c.admission.maxRequestBytes
	g.Auth.APIKey, g.Auth.AdminAPIKey = c.apiKey, c.adminAPIKey
	g.MaxWorkers = c.maxWorkers
	if len(c.adminWorkerAllow) > 0 {
		g.AdminWorkerAllow = c.adminWorkerAllow
	}
	g.Logger = log
	return g, stop, nil
}

// workerGroup is a list of worker URLs that share a role.
type workerGroup struct {
	role workers.Role
	urls []string
}

// workerGroups reads the worker flags: regular workers, or with
// --pd-disaggregation prefill workers and decode workers. With none given it
// starts simulated engines; stop ends them.
func workerGroups(cfg serveConfig, log *slog.Logger) (groups []workerGroup, stop func(), err error) {
	stop = func() {}
	urls := []string(cfg.workerURLs)
	if cfg.discovery.enabled { // the pods are the workers; URLs given join them
		if !cfg.pdMode {
			return []workerGroup{{workers.RoleRegular, urls}}, stop, nil
		}
		return []workerGroup{{workers.RolePrefill, urls}, {workers.RoleDecode, cfg.decodeURLs}}, stop, nil
	}
	if !cfg.pdMode {
		if len(urls) == 0 {
			sims, err := startEmbedded(cfg, sim.RoleRegular, log)
			if err != nil {
				return nil, stop, err
			}
			stop, urls = stopAll(sims), simURLs(sims)
		}
		return []workerGroup{{workers.RoleRegular, urls}}, stop, nil
	}
	decodes := []string(cfg.decodeURLs)
	switch {
	case len(urls) == 0 && len(decodes) == 0:
		prefill, err := startEmbedded(cfg, sim.RolePrefill, log)
		if err != nil {
			return nil, stop, err
		}
		decode, err := startEmbedded(cfg, sim.RoleDecode, log)
		if err != nil {
			stopAll(prefill)()
			return nil, stop, err
		}
		stop = stopAll(append(prefill, decode...))
		urls, decodes = simURLs(prefill), simURLs(decode)
	case len(urls) == 0 || len(decodes) == 0:
		return nil, stop, errors.New("--pd-disaggregation needs prefill workers (--worker-urls) and decode workers (--decode), or neither (simulated engines)")
	}
	return []workerGroup{{workers.RolePrefill, urls}, {workers.RoleDecode, decodes}}, stop, nil
}

func simURLs(sims []*sim.Process) []string {
	var out []string
	for _, s := range sims {
		out = append(out, "grpc://"+s.Addr())
	}
	return out
}

func stopAll(sims []*sim.Process) func() {
	return func() {
		for _, s := range sims {
			s.Stop()
		}
	}
}

// startEmbedded starts the simulated engines used when no worker is given.
func startEmbedded(cfg serveConfig, role string, log *slog.Logger) ([]*sim.Process, error) {
	if cfg.embeddedWorkers < 1 {
		return nil, fmt.Errorf("--embedded-workers is %d; at least 1 is needed when --worker-urls is empty", cfg.embeddedWorkers)
	}
	if cfg.embeddedReply != sim.ReplyEcho && cfg.embeddedReply != sim.ReplyRandom {
		return nil, fmt.Errorf("--embedded-reply %q: want %s or %s", cfg.embeddedReply, sim.ReplyEcho, sim.ReplyRandom)
	}
	var sims []*sim.Process
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
		sc.Reply = cfg.embeddedReply
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
	log.Info(embeddedNotice(cfg.embeddedReply), "engines", len(sims), "role", role, "reply", cfg.embeddedReply,
		"page_size", sim.DefaultConfig().PageSize)
	return sims, nil
}

// embeddedNotice says what answers from the embedded engines are, so that
// nobody takes them for a model's (or random text for a detokenizer bug).
func embeddedNotice(reply string) string {
	if reply == sim.ReplyEcho {
		return "the embedded engines are simulated: they echo the last user message (--worker-urls for real engines)"
	}
	return "the embedded engines are simulated: they answer with random tokens (--worker-urls for real engines)"
}

// flushTraces sends the spans still buffered when serve returns, within a
// bound of its own: ctx has usually ended by then.
func flushTraces(ctx context.Context, log *slog.Logger, traces *tracing.Provider) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := traces.Shutdown(fctx); err != nil {
		log.Warn("spans not flushed", "error", err)
	}
}

// newLogger builds the process's logger (see internal/logging).
func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return logging.New(w, lvl, json), nil
}
