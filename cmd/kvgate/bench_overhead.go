package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/bench"
)

// overheadFlags are the flags of `kvgate bench --overhead` alone.
type overheadFlags struct {
	cpu          bool
	processes    bool
	promptTokens string
	cpuBudget    time.Duration
	routerPprof  string
	routerArgs   string
	// compareArgs and compareBinary, either set, make --cpu measure the
	// router as given against a second router (these flags, or this
	// binary) and the relay, taking turns, cpuRounds rounds.
	compareArgs   string
	compareBinary string
	cpuRounds     int
}

func (o *overheadFlags) register(fs interface {
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
	DurationVar(*time.Duration, string, time.Duration, string)
	IntVar(*int, string, int, string)
}) {
	fs.BoolVar(&o.cpu, "cpu", false, "with --overhead: measure the router's own CPU time per request instead (token ids; text missing, hitting L0, hitting L1 the tokenizer cache), with the router (kvgate serve) and the engine (kvgate sim) each in a process of its own, and the requests/s of one router")
	fs.BoolVar(&o.processes, "processes", false, "with --overhead: run the router (kvgate serve) and the engine (kvgate sim) of the latency table each as a process of its own, as --cpu does, so that neither's garbage collection lands on the other's latency")
	fs.StringVar(&o.promptTokens, "prompt-tokens", "", "with --overhead: comma-separated prompt lengths in tokens (empty: 1024,8192; with --cpu 1024,8192,65536)")
	fs.DurationVar(&o.cpuBudget, "cpu-budget", 2*time.Second, "with --overhead --cpu: router CPU time each case runs for (the kernel counts it in 10ms ticks)")
	fs.StringVar(&o.routerArgs, "router-args", "", "with --overhead --cpu or --processes: more flags for the router, space-separated (e.g. '--kv-events off' leaves the KV event mirror out)")
	fs.StringVar(&o.routerPprof, "router-pprof-addr", "", "with --overhead --cpu: the router's --pprof-addr, to profile it while the cases run (loopback host:port)")
	fs.StringVar(&o.compareArgs, "compare-router-args", "", "with --overhead --cpu: also run a second router with these flags added (space-separated, e.g. '--kv-events off'), and the relay, each with an engine of its own, taking turns on batches of fresh token ids in one run, and print each round's CPU per request and the ratios")
	fs.StringVar(&o.compareBinary, "compare-binary", "", "with --overhead --cpu: as --compare-router-args, the second router run from this kvgate binary (another build) with --router-args; both flags together combine")
	fs.IntVar(&o.cpuRounds, "cpu-rounds", 10, "with --compare-router-args or --compare-binary: rounds of one batch (4,000 requests) per front")
}

func (o *overheadFlags) lengths() ([]int, error) {
	var out []int
	for _, f := range strings.Split(o.promptTokens, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--prompt-tokens %q: want comma-separated positive token counts", o.promptTokens)
		}
		out = append(out, n)
	}
	return out, nil
}

// runOverhead runs `kvgate bench --overhead`: the router's added latency and
// its request rate, measured against one zero-latency simulated engine; with
// --cpu, its CPU time per request instead. --requests and --concurrency,
// when given, override the latency table's defaults; --concurrency is the
// clients per case with --cpu.
func runOverhead(ctx context.Context, c *benchConfig, w, stderr io.Writer) error {
	lengths, err := c.ovh.lengths()
	if err != nil {
		return err
	}
	var exe string
	if c.ovh.cpu || c.ovh.processes {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("--cpu and --processes start this kvgate binary as router and engine: %w", err)
		}
	}
	comparing := c.ovh.compareArgs != "" || c.ovh.compareBinary != ""
	if comparing && !c.ovh.cpu {
		return fmt.Errorf("--compare-router-args and --compare-binary need --overhead --cpu")
	}
	if comparing && c.ovh.routerPprof != "" {
		return fmt.Errorf("--router-pprof-addr cannot profile two routers at one address: leave out --compare-router-args and --compare-binary")
	}
	if c.ovh.cpuRounds <= 0 {
		return fmt.Errorf("--cpu-rounds %d: want a positive number of rounds", c.ovh.cpuRounds)
	}
	if comparing {
		return runOverheadAlternating(ctx, c, exe, lengths, w, stderr)
	}
	if c.ovh.cpu {
		cfg := bench.DefaultOverheadCPUConfig()
		cfg.Executable, cfg.Budget, cfg.PprofAddr, cfg.Stderr = exe, c.ovh.cpuBudget, c.ovh.routerPprof, stderr
		cfg.RouterArgs = strings.Fields(c.ovh.routerArgs)
		if len(lengths) > 0 {
			cfg.PromptTokens = lengths
		}
		if c.concurrency > 0 {
			cfg.Concurrency = c.concurrency
		}
		_, err = bench.RunOverheadCPU(ctx, cfg, w)
		return err
	}
	if c.ovh.routerPprof != "" {
		return fmt.Errorf("--router-pprof-addr needs --cpu")
	}
	if c.ovh.routerArgs != "" && !c.ovh.processes {
		return fmt.Errorf("--router-args needs --cpu or --processes (without them the router runs in this process)")
	}
	cfg := bench.DefaultOverheadConfig()
	if c.ovh.processes {
		cfg.Executable, cfg.Stderr, cfg.RouterArgs = exe, stderr, strings.Fields(c.ovh.routerArgs)
	}
	if len(lengths) > 0 {
		cfg.PromptTokens = lengths
	}
	if c.workload.Requests > 0 {
		cfg.Requests = c.workload.Requests
	}
	if c.concurrency > 0 {
		cfg.Concurrency = c.concurrency
	}
	_, err = bench.RunOverhead(ctx, cfg, w)
	return err
}

// runOverheadAlternating runs --overhead --cpu with --compare-router-args or
// --compare-binary: the router as given ("main"), the second router
// ("compared") and the relay ("relay"), taking turns in one run.
func runOverheadAlternating(ctx context.Context, c *benchConfig, exe string, lengths []int, w, stderr io.Writer) error {
	cfg := bench.OverheadAltConfig{OverheadCPUConfig: bench.DefaultOverheadCPUConfig(), Rounds: c.ovh.cpuRounds}
	cfg.Executable, cfg.Stderr = exe, stderr
	cfg.PromptTokens = []int{1024}
	if len(lengths) > 0 {
		cfg.PromptTokens = lengths
	}
	if c.concurrency > 0 {
		cfg.Concurrency = c.concurrency
	}
	mainArgs := strings.Fields(c.ovh.routerArgs)
	cfg.Fronts = []bench.OverheadFront{
		{Label: "main", RouterArgs: mainArgs},
		{Label: "compared", Executable: c.ovh.compareBinary, RouterArgs: append(slices.Clone(mainArgs), strings.Fields(c.ovh.compareArgs)...)},
		{Label: "relay", Relay: true},
	}
	_, err := bench.RunOverheadCPUAlternating(ctx, cfg, w)
	return err
}
