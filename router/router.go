// Package router builds a whole kvgate router from its configuration: the
// worker registry and its connections, the routing policies (and the
// prefill/decode dispatcher), the model's tokenizer and chat template, the
// gRPC server, and the background loops that keep worker health, load and
// policy state current.
//
// It is the one place the router is wired. `kvgate serve`, `kvgate bench`
// and the tests all build their router here, so what is measured and tested
// is what ships.
package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/internal/auth"
	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// Config is everything a router is made of.
type Config struct {
	// WorkerURLs are the engines serving whole requests or, with PD, the
	// prefill engines (each may end in @BOOTSTRAP_PORT).
	WorkerURLs []string
	// PD turns on prefill/decode disaggregation; DecodeURLs are then the
	// decode engines.
	PD         bool
	DecodeURLs []string
	// Protocol of every worker; workers.ProtocolUnknown asks each engine.
	Protocol workers.Protocol
	// DPAware makes each data-parallel rank of an engine a routing target
	// of its own, url@rank (see workers/dprank.go).
	DPAware bool
	// Policy places regular requests; PrefillPolicy and DecodePolicy place
	// the two legs with PD. Options configure them.
	Policy, PrefillPolicy, DecodePolicy string
	Options                             policy.Options
	// LearnBlockSize takes the tree's page size from the workers' reported
	// KV page size (else 16), overriding Options' block size.
	LearnBlockSize bool
	// LearnVllmBlockSize does the same for vllm_cache_aware's block size
	// (Options.VllmCacheAware.BlockSize): a block tracker of 16-token
	// blocks in front of engines of 32 refuses their KV events and matches
	// at the wrong granularity.
	LearnVllmBlockSize bool

	// Text is the model's tokenizer and chat template when the caller has
	// loaded it; otherwise TextSources are loaded, and without those the
	// tokenizer comes from the first worker that serves one (GetTokenizer).
	Text *textmodel.Model
	// TokenIDsOnly loads no tokenizer at all: the router takes token ids,
	// and text, Chat and stop strings answer FAILED_PRECONDITION.
	TokenIDsOnly bool
	TextSources  textmodel.Sources
	// IGW serves several models behind one router (--enable-igw): workers
	// are grouped by the model they report, and each model gets its own
	// policies, tree and tokenizer, from ModelTexts[name], else
	// TextSources, else one of its workers. Requests name their model.
	IGW        bool
	ModelTexts map[string]textmodel.Sources
	// Models are the models' own routing settings with IGW
	// (--model-config); a model without an entry, and every setting an
	// entry leaves empty, takes the router-wide ones above.
	Models map[string]ModelConfig
	// ReasoningParser is --reasoning-parser (see server.Config).
	ReasoningParser string
	// ToolCallParser is --tool-call-parser (see server.Config).
	ToolCallParser string
	TextOptions    textmodel.Options
	FetchTimeout   time.Duration

	// Health configures the health checks; LoadPollInterval the GetLoads
	// polls.
	Health           workers.HealthConfig
	LoadPollInterval time.Duration
	// WaitForWorkers makes New wait up to StartupTimeout until at least one
	// worker is connected, and fail if none is. Otherwise New returns at
	// once: workers that do not answer are registered unhealthy and join
	// when they answer.
	WaitForWorkers bool
	StartupTimeout time.Duration
	// KVEvents subscribes to every worker's KV events when a policy mirrors
	// the engines' caches (cache_aware, vllm_cache_aware), so the policy's
	// view of each cache is exact; engines without events stay approximate.
	// KVSubscription tunes the subscriptions (its Handler, Logger and
	// Metrics are the router's).
	KVEvents       bool
	KVSubscription workers.KVSubscriptionConfig
	// Breaker configures every worker's circuit breaker.
	Breaker workers.BreakerConfig
	// WorkerTLS is the TLS configuration for grpcs:// workers; nil: the
	// system's roots, no client certificate.
	WorkerTLS *tls.Config
	// WorkerDialOptions are added to every engine connection's dial
	// options, after kvgate's own, so they win (see
	// workers.ConnectOptions.DialOptions).
	WorkerDialOptions []grpc.DialOption
	// DrainTimeout is how long Admin.RemoveWorker lets a worker's requests
	// finish when the call names no timeout.
	DrainTimeout time.Duration

	// Reliability is the pipeline's retries and timeouts.
	Reliability server.Reliability
	// Admission bounds the requests accepted, MaxRequestBytes one message.
	Admission       server.AdmissionConfig
	MaxRequestBytes int
	// MaxEngineAnswerBytes is the largest message accepted from an engine;
	// requests whose answer could be larger are refused. 0:
	// workers.DefaultMaxAnswerBytes, which every request within a
	// workers.AnswerContextTokens context fits.
	MaxEngineAnswerBytes int

	// Credentials secure kvgate's listeners (TLS, mutual TLS); nil:
	// plaintext.
	Credentials credentials.TransportCredentials
	// Auth holds the API keys; with none set every service is open.
	Auth auth.Config
	// SeparateAdmin serves Admin only through Router.ServeAdmin.
	SeparateAdmin bool
	// MaxWorkers bounds the engines in the fleet (Admin.AddWorker and
	// service discovery are refused beyond it); 0: DefaultMaxWorkers.
	MaxWorkers int
	// AdminWorkerAllow are the hosts Admin.AddWorker may connect to (see
	// server.WorkerAllow); nil: the hosts of WorkerURLs and DecodeURLs.
	AdminWorkerAllow []string
	// Discovery, when set, adds and removes workers as Kubernetes pods
	// become Ready and leave (see package discovery), beside WorkerURLs;
	// its PD must equal PD. With it, PD needs no worker URLs.
	Discovery *discovery.Config

	// TracerProvider, when set, traces every request (see server.Config)
	// and makes every call to an engine carry the trace's W3C traceparent.
	// nil: tracing is off. The caller owns it and shuts it down after the
	// router, which flushes the last spans.
	TracerProvider trace.TracerProvider

	Logger *slog.Logger
}

// DefaultConfig returns a router with SMG's defaults: cache_aware (PD:
// cache_aware prefill, power_of_two decode), health checks every 10 s, load
// polls every second, and the server's default reliability settings.
func DefaultConfig() Config {
	return Config{
		Policy:             "cache_aware",
		PrefillPolicy:      "cache_aware",
		DecodePolicy:       "power_of_two",
		Options:            policy.DefaultOptions(),
		LearnBlockSize:     true,
		LearnVllmBlockSize: true,
		FetchTimeout:       30 * time.Second,
		Health:             workers.DefaultHealthConfig(),
		LoadPollInterval:   workers.DefaultLoadPollInterval,
		StartupTimeout:     60 * time.Second,
		Breaker:            workers.DefaultBreakerConfig(),
		KVEvents:           true,
		KVSubscription:     workers.DefaultKVSubscriptionConfig(nil),
		DrainTimeout:       30 * time.Second,
		Reliability:        server.DefaultReliability(),
		Admission:          server.DefaultAdmissionConfig(),
		MaxRequestBytes:    server.DefaultMaxRequestBytes,
	}
}

// Router is a built router: its server, fleet and background loops.
type Router struct {
	Server   *server.Server
	Registry *workers.Registry
	// Policy is the regular policy, or with PD the prefill policy.
	Policy policy.Policy
	Text   *textmodel.Model
	// KVEvents are the workers' KV event subscriptions; nil when no policy
	// consumes them or Config.KVEvents is off.
	KVEvents *workers.KVSubscriptions

	log *slog.Logger
	// pdMode: with PD.
	pdMode bool
	// ports are the prefill workers' bootstrap ports.
	ports *pd.BootstrapPorts
	// wantText tells the tokenizer fetch that a worker joined (see
	// fetchTextOnJoin).
	wantText     func()
	connect      workers.ConnectOptions // how AddWorker connects
	vocab        *vocabGuard            // refuses engines whose vocabulary does not fit
	limits       *fleetLimits           // bounds the fleet's growth at run time
	drainTimeout time.Duration
	bgCtx        context.Context
	stopBG       context.CancelFunc
	bg           sync.WaitGroup
	watches      []func()
	once         sync.Once
	// textJoined is closed the first time a tokenizer is loaded from an
	// engine; textJoinedOnce closes it.
	textJoined     chan struct{}
	textJoinedOnce sync.Once
}

// validate reports the first setting New cannot build a router from.
func (cfg Config) validate() error {
	for _, name := range []string{cfg.Policy, cfg.PrefillPolicy, cfg.DecodePolicy} {
		if name != "" && !slices.Contains(policy.Names(), name) {
			return fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(policy.Names(), ", "))
		}
	}
	if !cfg.PD && len(cfg.DecodeURLs) > 0 {
		return errors.New("decode workers need prefill/decode disaggregation (--pd-disaggregation)")
	}
	if cfg.PD && cfg.Discovery == nil && (len(cfg.WorkerURLs) == 0 || len(cfg.DecodeURLs) == 0) {
		return errors.New("prefill/decode disaggregation needs prefill workers (--worker-urls) and decode workers (--decode)")
	}
	if err := cfg.Reliability.Validate(); err != nil {
		return err
	}
	if err := cfg.Admission.Validate(); err != nil {
		return err
	}
	if cfg.MaxRequestBytes < 1 {
		return fmt.Errorf("--max-request-bytes is %d; it must be >= 1", cfg.MaxRequestBytes)
	}
	if cfg.MaxEngineAnswerBytes < 0 {
		return fmt.Errorf("MaxEngineAnswerBytes is %d; it must be >= 0 (0: the default)", cfg.MaxEngineAnswerBytes)
	}
	if err := cfg.Breaker.Validate(); err != nil {
		return fmt.Errorf("circuit breaker: %w", err)
	}
	return cfg.validateModels()
}

// New connects to the workers, builds the policies, tokenizer and server,
// and starts the background loops. Close (or Shutdown) stops them.
func New(ctx context.Context, cfg Config) (_ *Router, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Router{Registry: workers.NewRegistry(), log: log, drainTimeout: cfg.DrainTimeout, pdMode: cfg.PD,
		textJoined: make(chan struct{})}
	// Background work (health checks, load polls, policies' loops, workers
	// joining late) lives until Close.
	g.bgCtx, g.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.limits, err = newFleetLimits(cfg); err != nil {
		return nil, err
	}
	role, urls, ports, err := firstLegs(cfg)
	if err != nil {
		return nil, err
	}
	g.ports = pd.NewBootstrapPorts(ports)
	breaker := cfg.Breaker
	metrics := server.NewMetrics(g.Registry)
	breaker.OnChange = func(url string, from, to workers.BreakerState) {
		metrics.BreakerChanged(to)
		if to == workers.BreakerOpen {
			log.Warn("circuit breaker open: the worker gets no requests until its timeout", "worker", url, "from", from.String(),
				"timeout", cfg.Breaker.Timeout)
		} else {
			log.Info("circuit breaker "+to.String(), "worker", url, "from", from.String())
			if g.Server != nil {
				g.Server.HealthChanged() // requests waiting for room may use it now
			}
		}
	}
	// The server, and with it the model table, exists before any worker
	// joins: everything that follows a worker (its model, its KV events,
	// its vocabulary check) reads the table.
	route, subs, err := kvEventsOf(cfg, g.Registry, metrics, log)
	if err != nil {
		return nil, err
	}
	g.KVEvents = subs
	grouping := modeltable.OneModel
	if cfg.IGW {
		grouping = modeltable.ByName
	}
	rel, adm := cfg.Reliability, cfg.Admission
	if g.Server, err = server.New(server.Config{Registry: g.Registry, Models: grouping, Logger: log, Reliability: &rel, Admission: &adm,
		MaxRequestBytes: cfg.MaxRequestBytes, MaxEngineAnswerBytes: cfg.MaxEngineAnswerBytes, Fleet: g, Credentials: cfg.Credentials, Auth: authenticator(cfg.Auth, log),
		SeparateAdmin: cfg.SeparateAdmin, Metrics: metrics, KVEvents: kvStatusOf(subs, route), TracerProvider: cfg.TracerProvider,
		ReasoningParser: cfg.ReasoningParser, ToolCallParser: cfg.ToolCallParser}); err != nil {
		return nil, err
	}
	// A worker that joins, or is added or removed, changes the router's
	// health.
	g.watches = append(g.watches, g.Registry.Watch(func(workers.Change) { g.Server.UpdateHealth() }))
	models := g.Server.Models()
	if route != nil {
		route.policyOf = func(w *workers.Worker) policy.Policy {
			if m := models.Of(w); m != nil {
				return m.Policy(w.Role())
			}
			return nil
		}
	}

	g.vocab = &vocabGuard{reg: g.Registry, models: models}
	g.connect = workers.ConnectOptions{Protocol: cfg.Protocol, TLS: cfg.WorkerTLS, Breaker: &breaker, Admit: g.vocab.admit,
		DPAware: cfg.DPAware, DialOptions: cfg.WorkerDialOptions, MaxAnswerBytes: cfg.MaxEngineAnswerBytes}
	if cfg.TracerProvider != nil {
		g.connect.Propagator = tracing.Propagator{}
	}
	g.watches = append(g.watches, forgetRemoved(g.Registry, route, models.Policies))
	opts := g.connect
	opts.Role = role
	if err := joinAll(ctx, g.bgCtx, g.Registry, urls, opts, log); err != nil {
		return nil, err
	}
	if cfg.PD {
		opts.Role = workers.RoleDecode
		if err := joinAll(ctx, g.bgCtx, g.Registry, cfg.DecodeURLs, opts, log); err != nil {
			return nil, err
		}
	}
	if cfg.WaitForWorkers && cfg.Discovery == nil { // else startDiscovery waits
		wctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
		err := waitConnected(wctx, g.Registry)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("no worker reachable within --worker-startup-timeout (%v)", cfg.StartupTimeout)
		}
	}
	// The models are built once the workers given have had their chance to
	// connect, so that their policies learn the workers' page size.
	g.wantText = g.fetchTextOnJoin(cfg)
	g.watches = append(g.watches, g.watchModels(cfg, g.wantText))
	// Discovery starts before the tokenizers load, so that one can come
	// from the first engine discovered.
	if err := g.startDiscovery(ctx, cfg); err != nil {
		return nil, err
	}
	if err := g.startModels(ctx, cfg); err != nil {
		return nil, err
	}
	if m := models.Get(""); m != nil {
		g.Policy, g.Text = m.Main(), m.Text
	}

	bg := g.bgCtx
	health := cfg.Health
	health.OnChange = func(w *workers.Worker, healthy bool) {
		g.Server.UpdateHealth()
		g.Server.HealthChanged()
		if cfg.Health.OnChange != nil {
			cfg.Health.OnChange(w, healthy)
		}
	}
	g.bg.Go(func() { workers.RunHealthChecks(bg, g.Registry, health, log) })
	// Loads are polled more often while requests wait for an engine with
	// room, from the moment they start waiting, and each round wakes them
	// (late binding).
	// A poll may take as long as a health check (LoadPollHooks.Timeout).
	polls := workers.LoadPollHooks{Busy: func() bool { return g.Server.Waiting() > 0 }, Polled: g.Server.LoadsRefreshed,
		Wake: g.Server.WaitStarted(), Timeout: cfg.Health.Timeout}
	g.bg.Go(func() { workers.RunLoadPollsWith(bg, g.Registry, cfg.LoadPollInterval, polls, log) })
	if subs != nil {
		g.bg.Go(func() { subs.Run(bg, g.Registry) })
	}
	return g, nil
}

// Serve serves gRPC on lis until the router is shut down.
func (g *Router) Serve(lis net.Listener) error { return g.Server.Serve(lis) }

// ServeAdmin serves the Admin service on lis (Config.SeparateAdmin).
func (g *Router) ServeAdmin(lis net.Listener) error { return g.Server.ServeAdmin(lis) }

// authenticator checks the configured keys; nil when there are none.
func authenticator(c auth.Config, log *slog.Logger) *auth.Authenticator {
	if c.APIKey == "" && c.AdminAPIKey == "" {
		return nil
	}
	if c.Logger == nil {
		c.Logger = log
	}
	return auth.New(c)
}

// Shutdown stops the server (running requests may finish until ctx ends; see
// server.Server.Stop), then the background loops and the workers'
// connections.
func (g *Router) Shutdown(ctx context.Context) {
	g.Server.Stop(ctx)
	g.Close()
}

// Close stops the background loops and closes the workers' connections
// without waiting for requests; after Shutdown it does nothing.
func (g *Router) Close() {
	g.once.Do(func() {
		for _, stop := range g.watches {
			stop()
		}
		if g.stopBG != nil {
			g.stopBG()
		}
		g.bg.Wait()
		g.Registry.Close()
	})
}

// learnedPageSize is the KV page size the workers of role among ws report
// (the first that reports one; engines of one model share it), else 16.
func learnedPageSize(ws []*workers.Worker, role workers.Role) int {
	for _, w := range ws {
		if ps := w.Info().PageSize; ps > 0 && w.Role() == role {
			return ps
		}
	}
	return 16
}

// kvStatusOf is the server's status source for subs, nil when there are
// none (a nil pointer in the interface would not compare equal to nil).
func kvStatusOf(subs *workers.KVSubscriptions, route *kvRoute) server.KVEventStatuser {
	if subs == nil {
		return nil
	}
	return kvStatus{subs: subs, route: route}
}

// kvEventsOf are the KV event subscriptions of the workers and the route
// that hands their events to the policies; nil when no policy consumes them
// or Config.KVEvents is off.
func kvEventsOf(cfg Config, reg *workers.Registry, metrics *server.Metrics, log *slog.Logger) (*kvRoute, *workers.KVSubscriptions, error) {
	if !cfg.KVEvents || !consumesKVEvents(cfg) {
		return nil, nil, nil
	}
	route := &kvRoute{reg: reg}
	sc := cfg.KVSubscription
	sc.Handler, sc.Logger = route, log
	sc.Metrics = metrics.KVEventMetrics()
	subs, err := workers.NewKVSubscriptions(sc)
	if err != nil {
		return nil, nil, fmt.Errorf("KV event subscription: %w", err)
	}
	return route, subs, nil
}

// firstLegs are the role of the workers of Config.WorkerURLs (regular, or
// prefill with PD), their addresses, and the prefill workers' bootstrap
// ports (a PD worker URL may end in @BOOTSTRAP_PORT).
func firstLegs(cfg Config) (workers.Role, []string, map[string]int, error) {
	ports := map[string]int{}
	if !cfg.PD {
		return workers.RoleRegular, cfg.WorkerURLs, ports, nil
	}
	urls := make([]string, len(cfg.WorkerURLs))
	for i, u := range cfg.WorkerURLs {
		url, port, err := pd.ParsePrefillURL(u)
		if err != nil {
			return 0, nil, nil, err
		}
		urls[i] = url
		if port > 0 {
			ports[url] = port
		}
	}
	return workers.RolePrefill, urls, ports, nil
}
