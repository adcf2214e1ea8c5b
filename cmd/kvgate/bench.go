package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/bench"
	"golang.org/x/term"
)

// simFlagsSkipped are the simulated engine's flags that make no sense for a
// benchmark fleet (roles, faults) or would break its token-id workloads
// (vocabulary, tokenizer).
var simFlagsSkipped = map[string]bool{
	"model": true, "tokenizer-path": true, "vocab-size": true, "eos-token-id": true, "role": true, "bootstrap-port": true, "bootstrap-timeout": true, "kv-transfer-gbps": true, "dp-size": true,
	"never-publish": true, "fail-after": true, "kv-event-drop-every": true, "kv-event-duplicate-every": true, "kv-event-delay": true, "kv-event-flood-blocks": true, "kv-event-flood-ranks": true, "fail-unavailable": true, "fail-unimplemented": true, "stall-after": true, "unhealthy": true,
	"unimplemented": true, "delayed": true, "rpc-delay": true, "health-empty": true, "embed-empty": true, "grpc-health": true,
}

// benchConfig is everything `kvgate bench` is told on its command line.
type benchConfig struct {
	workload    bench.WorkloadConfig
	run         bench.Config
	policies    string
	seed        uint64
	concurrency int
	jsonPath    string
	requestsOut string
	plotPath    string
	speeds      speeds
	sloTTFT     time.Duration
	overhead    bool
	ovh         overheadFlags
	unique      bench.UniqueConfig
	peers       string
	peer        bench.PeerConfig
	// admission holds serve's admission flags; bench registers those of
	// benchAdmissionFlags.
	admission admissionFlags
}

func (c *benchConfig) register(fs *flag.FlagSet) {
	c.workload = bench.DefaultWorkloadConfig()
	c.run.Sim = bench.SimConfig()
	w := &c.workload
	fs.StringVar(&w.Name, "workload", bench.SharedPrefix, "workload: shared-prefix, multiturn, trace or unique (every request unique; needs --target)")
	fs.StringVar(&c.policies, "policies", "cache_aware,round_robin", "comma-separated policies to compare, each against a fresh fleet (cache_aware:least_loaded and cache_aware:smallest_tree pick cache_aware's miss fallback, vllm_cache_aware:chained and vllm_cache_aware:position the block tracker's keys, cache_aware:cost, cache_aware:threshold, cache_aware:wait, vllm_cache_aware:cost, vllm_cache_aware:threshold and vllm_cache_aware:wait the selection mode, and a further :u<weight> the wait mode's --cache-aware-uneven-weight, :s<weight> its --cache-aware-step-weight; pooled is the pooled reference: one simulated engine with the fleet's total KV capacity, prefill rate and batch, behind a router)")
	fs.IntVar(&c.run.Workers, "workers", 8, "simulated engines per fleet")
	c.run.Routers = []int{1}
	fs.Var((*routerCounts)(&c.run.Routers), "routers", "comma-separated router replica counts: each policy runs once per count, against a fresh fleet of --workers engines with that many routers in front, each request (each multiturn turn) sent to one chosen at random")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed (the same seed gives the same prompts and outputs)")
	fs.BoolVar(&c.run.Unseeded, "unseeded", false, "send no sampling seed with the requests (outputs then differ from run to run): vLLM's CPU build dies on a seeded request whose prefill is split")
	fs.Float64Var(&w.QPS, "qps", 0, "shared-prefix: Poisson arrival rate of requests; multiturn: of conversations; unique: evenly paced request starts (0: as fast as --concurrency allows)")
	fs.IntVar(&w.Requests, "requests", 0, "send at most this many requests (0: the whole workload)")
	fs.IntVar(&c.concurrency, "concurrency", -1, "maximum requests in flight (0: unlimited; -1: 64 for shared-prefix without --qps, 16 for unique, else unlimited); unique: streams open at once, so --requests N --concurrency N is a burst of N simultaneous streams")
	fs.StringVar(&w.TracePath, "trace", "", "trace workload: Mooncake-format JSONL file")
	fs.IntVar(&w.TraceBlockTokens, "trace-block-tokens", bench.DefaultTraceBlockTokens, "trace workload: tokens behind each of the trace's hash_ids (the block size it was recorded with; Mooncake's traces: 512)")
	c.speeds = speeds{1}
	fs.Var(&c.speeds, "speed", "trace workload: replay speed-up (timestamps are divided by it); several, comma-separated, replay the trace once per speed and --plot draws TTFT p50, p99 and goodput against speed per policy")
	fs.DurationVar(&c.sloTTFT, "slo-ttft", bench.DefaultSLOTTFT, "with several --speed values, or with --peers: the time to first token a request must meet to count towards goodput")
	fs.StringVar(&c.jsonPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&c.requestsOut, "requests-out", "", "write every request (when it was sent, its prompt's first 32 tokens as a hash, the worker that served it, TTFT, end-to-end time, prompt, cached and oracle tokens, error) as JSON lines to this file: where each prefix went and what it waited, request by request (not with several --speed values)")
	fs.StringVar(&c.plotPath, "plot", "", "write an SVG chart (TTFT CDF per policy, cache hit rate vs oracle; with several --speed values, TTFT p50, p99 and goodput against speed per policy) to this file")
	fs.BoolVar(&c.overhead, "overhead", false, "measure the router's own overhead instead: added latency, router vs direct, against a zero-latency engine at 1K and 8K prompt tokens, and the most requests/s it sustains (--requests and --concurrency apply)")
	c.ovh.register(fs)
	fs.StringVar(&c.peers, "peers", "", "run these other routers beside kvgate (smg): each --policies entry P runs as kvgate:P (kvgate serve in a process of its own) then as smg:P, alternating, each in front of a fresh fleet of the same simulated engines; kvgate:P or smg:P runs on one router only; pooled stays in this process")
	fs.StringVar(&c.peer.SMGBin, "smg-bin", "", "with --peers smg: SMG's launcher (empty: smg from PATH; make smg installs it)")
	fs.StringVar(&c.peer.TokenizerDir, "peer-tokenizer", defaultPeerTokenizer, "with --peers: directory of the tokenizer of the workloads' token ids (Llama 3's), served by the simulated engines and given to SMG")
	fs.DurationVar(&c.peer.ThroughputDuration, "peer-throughput", 5*time.Second, "with --peers: how long each router's throughput run lasts (1K-token prompts, one output token, engines without latency; 0: none)")
	fs.IntVar(&c.peer.ThroughputConcurrency, "peer-throughput-concurrency", 64, "with --peers: clients of the throughput run")
	c.registerAdmission(fs)
	fs.StringVar(&c.run.Target, "target", "", "host:port of a running router to measure instead of in-process fleets (one run, labelled \"target\" or --target-label)")
	fs.StringVar(&c.run.TargetFront, "target-front", "", "with --target: the API it serves, empty for kvgate's gRPC Router service or smg for SMG's HTTP /generate with token ids (needs --target-model)")
	fs.StringVar(&c.run.TargetModel, "target-model", "", "with --target-front smg: the model SMG is asked for")
	fs.StringVar(&c.run.TargetLabel, "target-label", "", "with --target: the run's label in the report (empty: target)")
	fs.DurationVar(&c.unique.Duration, "duration", 0, "unique: run for this long (0: until --requests are sent)")
	fs.IntVar(&c.unique.PromptBytes, "prompt-bytes", 4096, "unique: bytes of each text prompt")
	fs.IntVar(&c.unique.ChatEvery, "chat-every", 4, "unique: every N-th request is a Chat (system and user message) instead of a text Generate (0: none)")
	fs.StringVar(&c.unique.MetricsAddr, "target-metrics", "", "unique: host:port of the router's Prometheus endpoint; go_goroutines is sampled every 200 ms and its peak reported")
	fs.IntVar(&w.Groups, "groups", w.Groups, "shared-prefix: prompt groups")
	fs.IntVar(&w.PromptsPerGroup, "prompts-per-group", w.PromptsPerGroup, "shared-prefix: prompts per group")
	fs.IntVar(&w.SystemTokens, "system-tokens", w.SystemTokens, "shared-prefix: tokens of each group's system prompt")
	fs.IntVar(&w.QuestionTokens, "question-tokens", w.QuestionTokens, "shared-prefix: tokens of each question; multiturn: of each user turn")
	fs.IntVar(&w.OutputTokens, "output-tokens", w.OutputTokens, "shared-prefix, unique: output tokens per request")
	fs.IntVar(&w.Users, "users", w.Users, "multiturn: parallel conversations")
	fs.IntVar(&w.Rounds, "rounds", w.Rounds, "multiturn: turns per conversation")
	fs.IntVar(&w.MultiturnSystemTokens, "multiturn-system-tokens", w.MultiturnSystemTokens, "multiturn: tokens of the shared system prompt")
	fs.IntVar(&w.AnswerTokens, "answer-tokens", w.AnswerTokens, "multiturn: output tokens per turn")

	// The simulated engine's flags, as `kvgate sim` has them; its --seed is
	// --sim-seed here (--seed is the workload's).
	simFS := flag.NewFlagSet("sim", flag.ContinueOnError)
	c.run.Sim.RegisterFlags(simFS)
	simFS.VisitAll(func(f *flag.Flag) {
		if simFlagsSkipped[f.Name] {
			return
		}
		name := f.Name
		if fs.Lookup(name) != nil || name == "seed" {
			name = "sim-" + name
		}
		fs.Var(f.Value, name, "simulated engines: "+f.Usage)
	})
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := flag.NewFlagSet("kvgate bench", flag.ContinueOnError)
	c.register(fs)
	if err := parseFlags(fs, args, "bench", stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	if c.overhead {
		return runOverhead(ctx, &c, stdout, stderr)
	}
	if c.run.Target != "" && !slices.Equal(c.run.Routers, []int{1}) {
		return fmt.Errorf("--routers %s: --target is one running router; replicas are for in-process fleets", (*routerCounts)(&c.run.Routers))
	}
	if c.workload.Name == bench.Unique {
		return runUnique(ctx, &c, stdout, stderr)
	}
	c.workload.Seed = c.seed
	c.run.Seed = int32(c.seed & 0x7fffffff)
	c.run.Progress = stderr
	if isTerminal(stderr) {
		c.run.Live = stderr
	}
	for _, p := range strings.Split(c.policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.run.Policies = append(c.run.Policies, p)
		}
	}
	if err := c.checkPolicies(); err != nil {
		return err
	}
	if len(c.run.Policies) == 0 && c.run.Target == "" {
		return errors.New("--policies is empty")
	}
	c.run.Concurrency = c.concurrency
	if c.concurrency < 0 {
		c.run.Concurrency = 0
		if c.workload.Name == bench.SharedPrefix && c.workload.QPS == 0 {
			c.run.Concurrency = 64
		}
	}
	if c.workload.TraceBlockTokens < 1 || c.workload.TraceBlockTokens > 1<<16 {
		return fmt.Errorf("--trace-block-tokens %d: want 1 to 65536", c.workload.TraceBlockTokens)
	}
	c.workload.Speed = c.speeds[0]
	if len(c.speeds) > 1 {
		return c.runSweep(ctx, stdout, stderr)
	}
	wl, err := bench.Generate(c.workload)
	if err != nil {
		return err
	}
	run := c.runWorkload
	if c.peers != "" {
		run = c.runPeers
	}
	rep, err := run(ctx, wl, stderr)
	if err != nil {
		return err
	}
	if err := c.write(rep, stdout); err != nil {
		return err
	}
	if c.peers != "" {
		return writeGoodput(stdout, rep, c.sloTTFT)
	}
	return nil
}

// runWorkload runs wl in-process or against --target.
func (c *benchConfig) runWorkload(ctx context.Context, wl *bench.Workload, stderr io.Writer) (*bench.Report, error) {
	if c.run.Target != "" {
		fmt.Fprintf(stderr, "kvgate bench: %s, %d requests, router at %s\n", wl.Name, wl.Size(), c.run.Target)
	} else {
		routers := ""
		if !slices.Equal(c.run.Routers, []int{1}) {
			routers = fmt.Sprintf(" behind %s routers", (*routerCounts)(&c.run.Routers))
		}
		fmt.Fprintf(stderr, "kvgate bench: %s, %d requests, policies %s, %d simulated engines each%s\n", wl.Name, wl.Size(), strings.Join(c.run.Policies, ","), c.run.Workers, routers)
	}
	return bench.Run(ctx, c.run, wl)
}

// write prints rep and writes its --json and --plot files.
func (c *benchConfig) write(rep *bench.Report, stdout io.Writer) error {
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if c.jsonPath != "" {
		if err := writeFile(c.jsonPath, rep.WriteJSON); err != nil {
			return err
		}
	}
	if c.requestsOut != "" {
		if err := writeFile(c.requestsOut, rep.WriteRequests); err != nil {
			return err
		}
	}
	if c.plotPath != "" {
		note := c.note()
		if err := writeFile(c.plotPath, func(w io.Writer) error { return rep.WritePlot(w, note) }); err != nil {
			return err
		}
	}
	return nil
}

// routerCounts is the value of --routers: replica counts, comma-separated,
// each at least 1 and none twice (two runs of one count would carry the same
// label). A later --routers replaces an earlier one.
type routerCounts []int

func (r *routerCounts) String() string {
	s := make([]string, len(*r))
	for i, n := range *r {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (r *routerCounts) Set(v string) error {
	var counts []int
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", f)
		}
		if n < 1 {
			return fmt.Errorf("%d routers: each count must be at least 1", n)
		}
		if slices.Contains(counts, n) {
			return fmt.Errorf("%d is listed twice", n)
		}
		counts = append(counts, n)
	}
	if len(counts) == 0 {
		return errors.New("no router count given")
	}
	*r = counts
	return nil
}

// runUnique runs the unique workload against --target. Its concurrency
// defaults to 16 streams: enough to keep a router busy, few enough that a soak
// measures the router's structures rather than a backlog of streams.
func runUnique(ctx context.Context, c *benchConfig, stdout, stderr io.Writer) error {
	u := c.unique
	u.Target = c.run.Target
	u.Requests = c.workload.Requests
	u.QPS = c.workload.QPS
	u.OutputTokens = c.workload.OutputTokens
	u.Seed = c.seed
	u.Concurrency = c.concurrency
	if u.Concurrency < 0 {
		u.Concurrency = 16
	}
	if u.Concurrency == 0 {
		u.Concurrency = max(u.Requests, 1)
	}
	u.Progress = stderr
	fmt.Fprintf(stderr, "kvgate bench: unique, %d streams, router at %s\n", u.Concurrency, u.Target)
	rep, err := bench.RunUnique(ctx, u)
	if err != nil {
		return err
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if c.jsonPath != "" {
		return writeFile(c.jsonPath, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(rep)
		})
	}
	return nil
}

// note describes the fleet for the chart.
func (c *benchConfig) note() string {
	if c.run.Target != "" {
		return "router at " + c.run.Target
	}
	s := c.run.Sim
	note := fmt.Sprintf("%d simulated engines (time scale %g, prefill %g tok/s, decode %g ms/token, KV %d tokens), seed %d",
		c.run.Workers, s.TimeScale, s.PrefillTokensPerSec, s.DecodeMsPerToken, s.KVCapacityTokens, c.seed)
	if !slices.Equal(c.run.Routers, []int{1}) {
		note += fmt.Sprintf(", routers %s", (*routerCounts)(&c.run.Routers))
	}
	return note
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// isTerminal tells whether w is a terminal, where a status line rewritten in
// place reads well; in a file or a pipe it would be noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
