package router_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// simTokenizer is the simulated engines' built-in tokenizer, 2059 ids.
const (
	simTokenizer = "../workers/sim/tokenizer"
	simVocab     = 2059
)

// simWith starts a simulated engine, changed by set, for the test's length.
func simWith(t *testing.T, addr string, set func(*sim.Config)) *sim.Process {
	t.Helper()
	c := sim.DefaultConfig()
	c.TimeScale = 0
	c.Logger = slog.New(slog.DiscardHandler)
	if set != nil {
		set(&c)
	}
	s, err := sim.Start(c, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// vocab gives an engine a vocabulary of n ids (below its tokenizer's).
func vocab(n int) func(*sim.Config) {
	return func(c *sim.Config) { c.VocabSize, c.EOSTokenID = n, uint32(n-1) }
}

// config is a router in front of urls; the tokenizer comes from the first
// engine unless changed.
func config(log *slog.Logger, urls ...string) router.Config {
	c := router.DefaultConfig()
	c.WorkerURLs = urls
	c.Policy = "round_robin"
	c.FetchTimeout = 5 * time.Second
	c.Health.Interval = time.Hour
	c.Logger = log
	return c
}

func start(t *testing.T, cfg router.Config) (*router.Router, error) {
	t.Helper()
	g, err := router.New(context.Background(), cfg)
	if err == nil {
		t.Cleanup(g.Close)
	}
	return g, err
}

func TestStartUpChecksTheVocabularies(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	tests := []struct {
		name string
		sims []func(*sim.Config)
		// set changes the router's configuration; urls are the engines'.
		set  func(c *router.Config)
		want []string // in the error, SIM0 and SIM1 stand for the engines' URLs; nil: it starts
	}{
		{"all fit, tokenizer from a worker", []func(*sim.Config){nil, nil}, nil, nil},
		{"a worker smaller than the tokenizer", []func(*sim.Config){nil, vocab(1000)},
			func(c *router.Config) { c.TextSources.ModelPath = simTokenizer },
			[]string{"worker SIM1", "2059 token ids", "vocab_size 1000", "--model-path", "kvgate-sim-8b"}},
		{"a tokenizer smaller than the workers", []func(*sim.Config){tokenizerless(128256), tokenizerless(128256)},
			func(c *router.Config) { c.TextSources.ModelPath = simTokenizer }, nil},
		{"workers of one model disagree, no tokenizer", []func(*sim.Config){vocab(1500), vocab(1000)},
			func(c *router.Config) { c.TokenIDsOnly = true },
			[]string{"worker SIM1", "vocab_size 1000", "worker SIM0", "vocab_size 1500", "must agree"}},
		{"workers of two models may differ", []func(*sim.Config){vocab(1500), func(c *sim.Config) { vocab(1000)(c); c.Model = "other" }},
			func(c *router.Config) { c.TokenIDsOnly = true }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var urls []string
			for _, set := range tc.sims {
				urls = append(urls, "grpc://"+simWith(t, "127.0.0.1:0", set).Addr())
			}
			cfg := config(discard, urls...)
			if tc.set != nil {
				tc.set(&cfg)
			}
			_, err := start(t, cfg)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("the router did not start: %v", err)
				}
				return
			}
			if !errors.Is(err, workers.ErrIncompatible) {
				t.Fatalf("error %v; want one wrapping workers.ErrIncompatible", err)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("SIM0", urls[0], "SIM1", urls[1]).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// tokenizerless is an engine serving no tokenizer with n ids.
func tokenizerless(n int) func(*sim.Config) {
	return func(c *sim.Config) { c.TokenizerDir = "none"; vocab(n)(c) }
}

// A worker added at run time that does not fit is refused before it gets
// a request; one that fits joins.
func TestAddWorkerChecksTheVocabulary(t *testing.T) {
	first := simWith(t, "127.0.0.1:0", nil)
	g, err := start(t, config(slog.New(slog.DiscardHandler), "grpc://"+first.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	small := simWith(t, "127.0.0.1:0", vocab(1000))
	_, err = g.AddWorker(context.Background(), small.Addr(), workers.RoleRegular, workers.ProtocolUnknown, 0)
	if !errors.Is(err, workers.ErrIncompatible) || !strings.Contains(err.Error(), "vocab_size 1000") ||
		!strings.Contains(err.Error(), strconv.Itoa(simVocab)) {
		t.Fatalf("AddWorker of a smaller vocabulary: %v; want it refused with both sizes", err)
	}
	if _, ok := g.Registry.Get("grpc://" + small.Addr()); ok {
		t.Fatal("the refused worker is in the registry")
	}
	fits := simWith(t, "127.0.0.1:0", nil)
	if _, err := g.AddWorker(context.Background(), fits.Addr(), workers.RoleRegular, workers.ProtocolUnknown, 0); err != nil {
		t.Fatalf("AddWorker of a worker that fits: %v", err)
	}
}

// A worker given at start-up that answers only later is checked when it
// connects: one that does not fit stays out, and the log says why.
func TestLateWorkerIsCheckedWhenItConnects(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	late := lis.Addr().String()
	lis.Close() // nothing listens there yet
	first := simWith(t, "127.0.0.1:0", nil)
	logs := &records{}
	g, err := start(t, config(slog.New(logs), "grpc://"+first.Addr(), "grpc://"+late))
	if err != nil {
		t.Fatal(err)
	}
	simWith(t, late, vocab(1000))
	testutil.Eventually(t, "the late worker's refusal to be logged", func() bool { return logs.has("not admitted", "vocab_size 1000") })
	if w, ok := g.Registry.Get("grpc://" + late); !ok || w.Connected() {
		t.Fatalf("the late worker is connected (%v); want its placeholder kept", ok)
	}
}

// records keeps the log's messages and error attributes.
type records struct {
	mu    sync.Mutex
	lines []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	return nil
}

// has reports whether one line holds all of subs.
func (r *records) has(subs ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}
