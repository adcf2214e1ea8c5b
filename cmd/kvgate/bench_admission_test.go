package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/kvgate/kvgate/bench"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/server"
)

// TestBenchAdmissionFlagsReachTheRouter: serve's admission and
// late-binding flags given to `kvgate bench` are in the configuration its
// in-process routers are built from (a real testbed, as bench starts it),
// and in the arguments of `kvgate serve` with --peers, which serve parses
// back to the same configuration; without them, the routers have serve's
// defaults.
func TestBenchAdmissionFlagsReachTheRouter(t *testing.T) {
	defaults := server.DefaultAdmissionConfig()
	for _, tc := range []struct {
		name string
		args []string
		want func(*server.AdmissionConfig)
	}{
		{"serve's defaults", nil, func(*server.AdmissionConfig) {}},
		{"avoid full engines", []string{"--late-binding-avoid-full"},
			func(c *server.AdmissionConfig) { c.AvoidFullEngines = true }},
		{"engine queues count as full", []string{"--late-binding-engine-queue"},
			func(c *server.AdmissionConfig) { c.EngineQueueFull = true }},
		{"matching's window and passes", []string{"--late-binding-match-window", "32", "--late-binding-max-passes", "3"},
			func(c *server.AdmissionConfig) { c.MatchWindow, c.MaxPasses = 32, 3 }},
		{"the queue's size and timeout, the bound on requests", []string{"--queue-size", "7", "--queue-timeout-secs", "2.5", "--max-concurrent-requests", "-1"},
			func(c *server.AdmissionConfig) {
				c.QueueSize, c.QueueTimeout, c.MaxConcurrentRequests = 7, 2500*time.Millisecond, -1
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c benchConfig
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			want := defaults
			tc.want(&want)

			sc := c.run.Sim
			sc.TimeScale = 0
			f, err := bench.StartTestbed(testutil.Context(t, 10*time.Second), "round_robin", 1, sc, c.run.Router)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := f.Config.Admission; got != want {
				t.Errorf("in-process router's admission:\n got %+v\nwant %+v", got, want)
			}

			var served admissionFlags
			serve := flag.NewFlagSet("serve", flag.ContinueOnError)
			served.register(serve)
			if err := serve.Parse(c.serveArgs()); err != nil {
				t.Fatalf("kvgate serve refuses %q: %v", c.serveArgs(), err)
			}
			if got := served.config(); got != want {
				t.Errorf("kvgate serve with --peers, %q:\n got %+v\nwant %+v", c.serveArgs(), got, want)
			}
		})
	}
}
