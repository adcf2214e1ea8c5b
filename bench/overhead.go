package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/router"

	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// Input kinds of an OverheadCase.
const (
	OverheadInputTokens    = "tokens"
	OverheadInputTextL1Hit = "text-l1-hit"
)

// OverheadConfig says what `kvgate bench --overhead` measures. Zero fields
// take the defaults of DefaultOverheadConfig.
type OverheadConfig struct {
	PromptTokens []int         // prompt lengths measured; default {1024, 8192}
	Requests     int           // measured requests per case and path, default 2000
	Warmup       int           // unmeasured requests per case and path first, default 200
	Concurrency  int           // concurrent clients of the throughput measurement, default 64
	Duration     time.Duration // length of each throughput measurement, default 5s
	// Executable, when set, is the kvgate binary to run the router (`kvgate
	// serve`) and the engine (`kvgate sim`) as child processes, as
	// RunOverheadCPU does, instead of both in this process: the router's
	// latency then carries no garbage collection or scheduling of the
	// engine's or the clients' goroutines, only the machine's sharing.
	Executable string
	// RouterArgs are more flags for the router process (with Executable).
	RouterArgs []string
	// Stderr receives the child processes' logs (with Executable); nil:
	// discarded.
	Stderr io.Writer
}

// DefaultOverheadConfig returns the configuration BENCHMARKS.md reports.
func DefaultOverheadConfig() OverheadConfig {
	return OverheadConfig{
		PromptTokens: []int{1024, 8192},
		Requests:     2000,
		Warmup:       200,
		Concurrency:  64,
		Duration:     5 * time.Second,
	}
}

func (c OverheadConfig) withDefaults() OverheadConfig {
	d := DefaultOverheadConfig()
	if len(c.PromptTokens) == 0 {
		c.PromptTokens = d.PromptTokens
	}
	if c.Requests <= 0 {
		c.Requests = d.Requests
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	c.Stderr = sharedStderr(c.Stderr)
	return c
}

// OverheadReport is what RunOverhead measured.
type OverheadReport struct {
	Cases []OverheadCase
	// MaxRequestsPerSec is the throughput one router sustained with
	// Concurrency clients sending 1K-token token-id requests.
	MaxRequestsPerSec float64
	// EngineRequestsPerSec is the same load sent straight to the engine, for
	// context: the router cannot exceed it, as both share the machine.
	EngineRequestsPerSec float64
}

// OverheadCase is the latency of one input kind at one prompt length, straight
// to the engine and through the router, in microseconds. Added is router minus
// direct, percentile by percentile.
type OverheadCase struct {
	Input                    string // "tokens" | "text-l1-hit"
	PromptTokens             int
	DirectP50us, DirectP99us float64
	RouterP50us, RouterP99us float64
	AddedP50us, AddedP99us   float64
}

// Simulated engine used by the token cases: Llama-3-sized vocabulary, no
// tokenizer.
const (
	overheadVocab = 128256
	overheadEOS   = 128001
	// ovhThroughputPrompt is the prompt length of the throughput measurement.
	ovhThroughputPrompt = 1024
	// ovhThroughputPool is how many distinct prompts the throughput clients
	// cycle through.
	ovhThroughputPool = 256
)

// RunOverhead measures the router's added latency and its throughput on this
// machine and prints a table to w.
//
// One simulated SGLang engine runs in-process at zero latency; a router is
// built in front of it as `kvgate serve` builds one (cache_aware policy).
// Each case sends Requests requests one at a time, alternating between the
// engine itself and the router, both over loopback gRPC, and times each from
// the call to the arrival of its completion (max_new_tokens 1, streamed).
func RunOverhead(ctx context.Context, cfg OverheadConfig, w io.Writer) (OverheadReport, error) {
	cfg = cfg.withDefaults()
	var rep OverheadReport
	for _, n := range cfg.PromptTokens {
		if n < 16 {
			return rep, fmt.Errorf("overhead: prompt length %d is too short (at least 16 tokens)", n)
		}
	}

	tok, err := cfg.start(ctx, false)
	if err != nil {
		return rep, err
	}
	defer tok.close()
	if err := rep.measureLengths(ctx, cfg, tok, OverheadInputTokens, tokenCase); err != nil {
		return rep, err
	}

	if cfg.Executable != "" {
		// The floor: the same token ids through `kvgate relay`, a front
		// process that forwards each call undecoded. What it adds is the
		// extra hop itself (a process to wake, a second loopback stream);
		// what the router adds beyond it is routing.
		relay, err := startCPURig(ctx, cfg.cpuRigConfig(), false, true)
		if err != nil {
			return rep, err
		}
		defer relay.close()
		if err := rep.measureLengths(ctx, cfg, relay, OverheadInputRelay, tokenCase); err != nil {
			return rep, fmt.Errorf("relay floor: %w", err)
		}
		relay.close()
	}

	txt, err := cfg.start(ctx, true)
	if err != nil {
		return rep, err
	}
	defer txt.close()
	if err := rep.measureLengths(ctx, cfg, txt, OverheadInputTextL1Hit, textCase); err != nil {
		return rep, err
	}

	if rep.EngineRequestsPerSec, err = throughput(ctx, tok, cfg, false); err != nil {
		return rep, err
	}
	if rep.MaxRequestsPerSec, err = throughput(ctx, tok, cfg, true); err != nil {
		return rep, err
	}
	printOverhead(w, cfg, rep)
	return rep, nil
}

// measureLengths adds one case per prompt length of cfg, measured by
// measure on r and labelled input.
func (rep *OverheadReport) measureLengths(ctx context.Context, cfg OverheadConfig, r ovhPaths, input string,
	measure func(context.Context, ovhPaths, OverheadConfig, int) (OverheadCase, error)) error {
	for _, n := range cfg.PromptTokens {
		c, err := measure(ctx, r, cfg, n)
		if err != nil {
			return err
		}
		c.Input = input
		rep.Cases = append(rep.Cases, c)
	}
	return nil
}

// ovhRig is a rig of RunOverhead: the two paths, and how to end them.
type ovhRig interface {
	ovhPaths
	close()
}

// start starts a rig for the latency cases: in this process, or with
// Executable set, the router and engine as child processes.
func (c OverheadConfig) start(ctx context.Context, withText bool) (ovhRig, error) {
	if c.Executable == "" {
		return startOverheadRig(ctx, withText)
	}
	return startCPURig(ctx, c.cpuRigConfig(), withText, false)
}

// cpuRigConfig is the configuration of RunOverheadCPU's rig that starts
// this measurement's processes.
func (c OverheadConfig) cpuRigConfig() OverheadCPUConfig {
	pc := DefaultOverheadCPUConfig()
	pc.Executable, pc.RouterArgs, pc.Stderr = c.Executable, c.RouterArgs, c.Stderr
	return pc.withDefaults()
}

// overheadRig is one simulated engine, a router in front of it, and a client
// connection to each.
type overheadRig struct {
	engine  *sim.Process
	g       *router.Router
	text    *textmodel.Model // the router's, with its caches; nil for tokens
	ref     *textmodel.Model // the same tokenizer without caches, for the direct path
	direct  sglang.SglangSchedulerClient
	router  kvgatev1.RouterClient
	conns   []*grpc.ClientConn
	served  chan error
	serving bool
	seq     atomic.Uint64
}

func startOverheadRig(ctx context.Context, withText bool) (r *overheadRig, err error) {
	discard := slog.New(slog.DiscardHandler)
	sc := sim.DefaultConfig()
	sc.TimeScale = 0
	sc.KVCapacityTokens = 4 << 20
	sc.MaxRunning = 4096
	sc.Logger = discard
	if withText {
		sc.TokenizerDir, sc.VocabSize = "", 0 // the built-in ChatML tokenizer
	} else {
		sc.TokenizerDir, sc.VocabSize, sc.EOSTokenID = "none", overheadVocab, overheadEOS
	}
	r = &overheadRig{served: make(chan error, 1)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.engine, err = sim.Start(sc, "127.0.0.1:0"); err != nil {
		return r, fmt.Errorf("overhead: start simulated engine: %w", err)
	}
	// The router as `kvgate serve` builds it, with its tokenizer (and its
	// caches) from the engine.
	gcfg := router.DefaultConfig()
	gcfg.WorkerURLs = []string{"grpc://" + r.engine.Addr()}
	gcfg.Protocol = workers.ProtocolSGLang
	gcfg.TextOptions = textmodel.Options{Cache: cache.DefaultConfig()}
	gcfg.Logger = discard
	if r.g, err = router.New(ctx, gcfg); err != nil {
		return r, fmt.Errorf("overhead: %w", err)
	}
	if withText {
		r.text = r.g.Text
		if r.text == nil {
			return r, errors.New("overhead: the simulated engine served no tokenizer")
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		archive, err := r.g.Registry.Snapshot()[0].Backend().Tokenizer(fctx)
		cancel()
		if err != nil {
			return r, fmt.Errorf("overhead: tokenizer from the simulated engine: %w", err)
		}
		if r.ref, err = textmodel.FromArchive(archive, "", textmodel.Options{}); err != nil {
			return r, fmt.Errorf("overhead: tokenizer: %w", err)
		}
		if st := r.text.CacheStats(); !st.L1Enabled[1] {
			return r, fmt.Errorf("overhead: the simulated engine's tokenizer gets no L1 cache: %s", st.L1DisabledReason[1])
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, fmt.Errorf("overhead: listen: %w", err)
	}
	go func() { r.served <- r.g.Serve(lis) }()
	r.serving = true

	dial := func(addr string) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err == nil {
			r.conns = append(r.conns, c)
		}
		return c, err
	}
	dc, err := dial(r.engine.Addr())
	if err != nil {
		return r, fmt.Errorf("overhead: %w", err)
	}
	rc, err := dial(lis.Addr().String())
	if err != nil {
		return r, fmt.Errorf("overhead: %w", err)
	}
	r.direct, r.router = sglang.NewSglangSchedulerClient(dc), kvgatev1.NewRouterClient(rc)
	return r, nil
}

func (r *overheadRig) reference() *textmodel.Model { return r.ref }

func (r *overheadRig) cacheHits(context.Context) (cacheCounts, error) {
	st := r.text.CacheStats()
	return cacheCounts{l0: float64(st.L0Hits), l1: float64(st.L1Hits)}, nil
}

func (r *overheadRig) close() {
	for _, c := range r.conns {
		_ = c.Close()
	}
	if r.g != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r.g.Shutdown(sctx)
		cancel()
		if r.serving {
			<-r.served
		}
	}
	if r.engine != nil {
		r.engine.Stop()
	}
}

// sendDirect sends ids straight to the engine, as the router's SGLang adapter
// would, and returns the time until the completion arrived and its prompt
// token count.
func (r *overheadRig) sendDirect(ctx context.Context, ids []uint32) (time.Duration, int, error) {
	d, n, err := ovhSendEngine(ctx, r.direct, fmt.Sprintf("bench-%d", r.seq.Add(1)), ids)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: %w", err)
	}
	return d, n, nil
}

// ovhSendEngine sends ids to an SGLang engine (or through a relay to one)
// as the router's adapter would, for one streamed token, and returns the
// time until the completion arrived and its prompt token count; the rest of
// the stream is drained.
func ovhSendEngine(ctx context.Context, engine sglang.SglangSchedulerClient, id string, ids []uint32) (time.Duration, int, error) {
	one := uint32(1)
	req := &sglang.GenerateRequest{
		RequestId: id,
		Tokenized: &sglang.TokenizedInput{InputIds: ids},
		SamplingParams: &sglang.SamplingParams{
			Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1, MaxNewTokens: &one, N: 1,
		},
		Stream: true,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	st, err := engine.Generate(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a completion")
			}
			return 0, 0, err
		}
		if c := m.GetComplete(); c != nil {
			d := time.Since(start)
			ovhDrain(st.Recv)
			return d, int(c.GetPromptTokens()), nil
		}
	}
}

// sendRouter sends req to the router and returns the time until the
// completion arrived and its prompt token count.
func (r *overheadRig) sendRouter(ctx context.Context, req *kvgatev1.GenerateRequest) (time.Duration, int, error) {
	d, n, err := ovhSendRouter(ctx, r.router, req)
	if err != nil {
		return 0, 0, fmt.Errorf("router: %w", err)
	}
	return d, n, nil
}

// ovhSendRouter sends req through a router and returns the time until the
// completion arrived and its prompt token count; the rest of the stream is
// drained.
func ovhSendRouter(ctx context.Context, router kvgatev1.RouterClient, req *kvgatev1.GenerateRequest) (time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	st, err := router.Generate(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a completion")
			}
			return 0, 0, err
		}
		if c := m.GetComplete(); c != nil {
			d := time.Since(start)
			ovhDrain(st.Recv)
			return d, int(c.GetUsage().GetPromptTokens()), nil
		}
	}
}

// ovhDrain reads a stream to its end, so that its resources are released.
func ovhDrain[T any](recv func() (T, error)) {
	for {
		if _, err := recv(); err != nil {
			return
		}
	}
}

func ovhRouterRequest(ids []uint32, text string) *kvgatev1.GenerateRequest {
	one := uint32(1)
	return &kvgatev1.GenerateRequest{
		InputIds:       ids,
		Text:           text,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &one},
		Stream:         true,
	}
}
