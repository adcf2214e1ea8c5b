package bench

// `kvgate bench --overhead --cpu --compare-*`: two routers and the relay
// measured in one run, taking turns.
//
// Run one after the other, two runs of the same build differ by up to 15%
// on a shared machine (BENCHMARKS.md, "A confirmed speculation expires
// without a descent"): the machine's state drifts between runs, and a change
// of a few percent cannot be told from it. Here every front (the router as
// given, a second router with other flags or from another build, and the
// relay floor) runs at once, each with its own engine, and they take turns:
// each round sends a batch of fresh token-id requests through every front,
// in an order that rotates by round, and reads each front's CPU over its
// own batch. A drift then lands on every front of a round alike, and the
// ratios are read round by round.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// OverheadFront is one front RunOverheadCPUAlternating measures: a router
// (`kvgate serve` from Executable with RouterArgs added) or, with Relay,
// `kvgate relay` from Executable (RouterArgs unused).
type OverheadFront struct {
	Label      string
	Executable string // empty: the configuration's
	RouterArgs []string
	Relay      bool
}

// OverheadAltConfig says what RunOverheadCPUAlternating measures. Of the
// embedded configuration it reads Executable (every engine's, and a
// front's without one of its own), PromptTokens, Concurrency, Warmup,
// MaxWall (a bound on each batch), Stderr and PprofAddr (the first front's
// only: two routers cannot serve profiles at one address).
type OverheadAltConfig struct {
	OverheadCPUConfig
	// Fronts are measured in turn; the first is the one the others are
	// compared with. At least two.
	Fronts []OverheadFront
	// Rounds is how many times each front runs a batch, default 10;
	// Batch the requests of one batch, default 4,000: the kernel reports
	// a process's CPU time in 10 ms ticks, and the relay's batch of 1K
	// prompts takes about 0.5 s of it.
	Rounds, Batch int
}

// OverheadAltReport holds, per prompt length (in PromptTokens' order), each
// front's router CPU µs per request in each round: CPU[length][front][round].
type OverheadAltReport struct {
	PromptTokens []int
	Fronts       []string
	CPU          [][][]float64
}

// Ratios returns, for the prompt length at index length, front f's CPU
// over front base's, round by round.
func (r OverheadAltReport) Ratios(length, f, base int) []float64 {
	a, b := r.CPU[length][f], r.CPU[length][base]
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// RunOverheadCPUAlternating starts every front with an engine of its own,
// then, per prompt length, warms each up and runs Rounds rounds of one
// batch per front, rotating their order, and prints each round's figures
// and the ratio of every front to each front after it, round by round.
func RunOverheadCPUAlternating(ctx context.Context, cfg OverheadAltConfig, w io.Writer) (OverheadAltReport, error) {
	base := cfg.OverheadCPUConfig.withDefaults()
	if cfg.Rounds <= 0 {
		cfg.Rounds = 10
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 4000
	}
	rep := OverheadAltReport{PromptTokens: base.PromptTokens}
	if len(cfg.Fronts) < 2 {
		return rep, errors.New("overhead --cpu: alternating needs two fronts at least")
	}
	if base.Executable == "" {
		return rep, errors.New("overhead --cpu: no kvgate executable to start the engines with")
	}
	rigs := make([]*cpuRig, len(cfg.Fronts))
	defer func() {
		for _, r := range rigs {
			if r != nil {
				r.close()
			}
		}
	}()
	for i, f := range cfg.Fronts {
		fc := base
		fc.RouterExecutable, fc.RouterArgs = f.Executable, f.RouterArgs
		if i > 0 {
			fc.PprofAddr = ""
		}
		r, err := startCPURig(ctx, fc, false, f.Relay)
		if err != nil {
			return rep, fmt.Errorf("front %s: %w", f.Label, err)
		}
		rigs[i] = r
		rep.Fronts = append(rep.Fronts, f.Label)
	}
	batch := base
	batch.Warmup, batch.Budget, batch.MaxRequests = 0, time.Duration(1<<62), cfg.Batch
	for _, n := range base.PromptTokens {
		// Every front gets the same requests: one source per front, all
		// seeded alike, each advanced only by that front's batches.
		next := make([]func(int) *kvgatev1.GenerateRequest, len(rigs))
		for i := range rigs {
			rng := rand.New(rand.NewPCG(uint64(n), 5))
			next[i] = func(int) *kvgatev1.GenerateRequest { return ovhRouterRequest(freshIDs(rng, n), "") }
		}
		byFront := make([][]float64, len(rigs))
		// The warm-up fills each engine's cache, so that every batch
		// measures the steady state: each request's pages stored and as
		// many evicted (with the mirror on, both come back as events).
		warm := batch
		warm.MaxRequests = cpuRigKVTokens/n + max(base.Warmup, 1)
		for i, r := range rigs {
			if _, err := r.run(ctx, warm, OverheadInputTokens, base.Concurrency, next[i], nil); err != nil {
				return rep, fmt.Errorf("front %s, %d tokens, warm-up: %w", cfg.Fronts[i].Label, n, err)
			}
		}
		for round := range cfg.Rounds {
			for k := range rigs {
				i := (round + k) % len(rigs)
				c, err := rigs[i].run(ctx, batch, OverheadInputTokens, base.Concurrency, next[i], nil)
				if err != nil {
					return rep, fmt.Errorf("front %s, %d tokens, round %d: %w", cfg.Fronts[i].Label, n, round+1, err)
				}
				byFront[i] = append(byFront[i], c.RouterCPUus)
			}
		}
		rep.CPU = append(rep.CPU, byFront)
	}
	printOverheadAlt(w, cfg, base, rep)
	return rep, nil
}

func printOverheadAlt(w io.Writer, cfg OverheadAltConfig, base OverheadCPUConfig, rep OverheadAltReport) {
	fmt.Fprintf(w, "Router CPU per request, fronts taking turns: each front (a router, kvgate serve, or kvgate relay) has a simulated SGLang engine of its own at zero latency (kvgate sim); CPU is the front process's user + system time (/proc/PID/stat) over its own batch of fresh token-id requests (max_new_tokens 1, streamed), %d requests from %d clients per batch, after a warm-up that fills each engine's KV cache (%d tokens) and %d requests more; %d rounds, the fronts' order rotating by round. %d CPUs, %s/%s.\n",
		cfg.Batch, base.Concurrency, cpuRigKVTokens, max(base.Warmup, 1), cfg.Rounds, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	for _, f := range cfg.Fronts {
		what := "kvgate serve"
		if f.Relay {
			what = "kvgate relay"
		} else if len(f.RouterArgs) > 0 {
			what += " " + strings.Join(f.RouterArgs, " ")
		}
		if f.Executable != "" {
			what += " (" + f.Executable + ")"
		}
		fmt.Fprintf(w, "  %s: %s\n", f.Label, what)
	}
	// Every front over each one after it: main ÷ compared, main ÷ relay,
	// compared ÷ relay.
	type pair struct{ a, b int }
	var pairs []pair
	for a := range rep.Fronts {
		for b := a + 1; b < len(rep.Fronts); b++ {
			pairs = append(pairs, pair{a, b})
		}
	}
	for li, n := range rep.PromptTokens {
		fmt.Fprintf(w, "\n%d-token prompts, µs of CPU per request:\n", n)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "round\t")
		for _, l := range rep.Fronts {
			fmt.Fprintf(tw, "%s\t", l)
		}
		for _, p := range pairs {
			fmt.Fprintf(tw, "%s ÷ %s\t", rep.Fronts[p.a], rep.Fronts[p.b])
		}
		fmt.Fprintln(tw)
		for round := range cfg.Rounds {
			fmt.Fprintf(tw, "%d\t", round+1)
			for f := range rep.Fronts {
				fmt.Fprintf(tw, "%.1f\t", rep.CPU[li][f][round])
			}
			for _, p := range pairs {
				fmt.Fprintf(tw, "%.3f\t", rep.CPU[li][p.a][round]/rep.CPU[li][p.b][round])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, p := range pairs {
			fmt.Fprintf(w, "%s ÷ %s: %s\n", rep.Fronts[p.a], rep.Fronts[p.b], spread(rep.Ratios(li, p.a, p.b)))
		}
	}
}

// spread summarizes per-round ratios: their median and range.
func spread(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("median %.3f, rounds %.3f–%.3f", med, s[0], s[len(s)-1])
}
