package main

import (
	"flag"
	"fmt"

	"github.com/kvgate/kvgate/router"
)

// benchAdmissionFlags are serve's flags that `kvgate bench` takes too, with
// the same names, defaults and meaning, for the routers it runs: late
// binding's limits and saturation rules change what a router does under
// overload, and were otherwise measured by rebuilding with other defaults.
var benchAdmissionFlags = []string{
	"max-concurrent-requests", "queue-size", "queue-timeout-secs",
	"late-binding-avoid-full", "late-binding-engine-queue",
	"late-binding-match-window", "late-binding-max-passes",
}

// registerAdmission adds benchAdmissionFlags to fs, as serve registers
// them, and points the run's routers at their values: the in-process ones
// through Config.Router, `kvgate serve` of --peers through its arguments.
func (c *benchConfig) registerAdmission(fs *flag.FlagSet) {
	serve := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.admission.register(serve)
	for _, name := range benchAdmissionFlags {
		f := serve.Lookup(name)
		fs.Var(f.Value, name, "the routers (in-process, and kvgate serve with --peers), as serve's: "+f.Usage)
	}
	c.run.Router = c.tuneRouter
}

// tuneRouter sets an in-process router's admission and late binding from
// the flags.
func (c *benchConfig) tuneRouter(rc *router.Config) {
	a, set := c.admission.config(), &rc.Admission
	set.MaxConcurrentRequests, set.QueueSize, set.QueueTimeout = a.MaxConcurrentRequests, a.QueueSize, a.QueueTimeout
	set.AvoidFullEngines, set.EngineQueueFull = a.AvoidFullEngines, a.EngineQueueFull
	set.MatchWindow, set.MaxPasses = a.MatchWindow, a.MaxPasses
}

// serveArgs are the flags for `kvgate serve` with --peers.
func (c *benchConfig) serveArgs() []string {
	a := &c.admission
	return []string{
		"--max-concurrent-requests", fmt.Sprint(a.maxConcurrent),
		"--queue-size", fmt.Sprint(a.queueSize),
		"--queue-timeout-secs", fmt.Sprint(a.queueTimeoutSec),
		fmt.Sprintf("--late-binding-avoid-full=%t", a.avoidFull),
		fmt.Sprintf("--late-binding-engine-queue=%t", a.engineQueue),
		"--late-binding-match-window", fmt.Sprint(a.matchWindow),
		"--late-binding-max-passes", fmt.Sprint(a.maxPasses),
	}
}
