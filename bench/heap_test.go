package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestUniqueHeapProfiles is the soak's microscope: scripts/soak.sh shows
// whether the router's RSS grows, this shows what grows. It runs the soak's
// router (cache_aware, --max-tree-size 2000000, a per-key rate limit) in
// process, sends rounds of unique requests and after each writes a heap
// profile, so `go tool pprof -base heap-1.pb.gz heap-3.pb.gz` lists what the
// later rounds added. It runs only when KVGATE_HEAP_PROFILE names the
// directory for the profiles; KVGATE_HEAP_REQUESTS sets the requests per
// round (default 20000), KVGATE_HEAP_ROUNDS the rounds (default 3).
func TestUniqueHeapProfiles(t *testing.T) {
	dir := os.Getenv("KVGATE_HEAP_PROFILE")
	if dir == "" {
		t.Skip("set KVGATE_HEAP_PROFILE=DIR to write heap profiles")
	}
	perRound := 20000
	if s := os.Getenv("KVGATE_HEAP_REQUESTS"); s != "" {
		var err error
		if perRound, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	rounds := 3
	if s := os.Getenv("KVGATE_HEAP_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	gcfg := router.DefaultConfig()
	gcfg.Options.CacheAware.MaxTreeSize = 2_000_000
	gcfg.Admission.RateLimitPerKey = 1000
	gcfg.TextOptions = textmodel.Options{Cache: cache.DefaultConfig()} // as kvgate serve's defaults
	gcfg.Logger = log
	for range 2 {
		sc := sim.DefaultConfig()
		sc.TimeScale, sc.Logger = 0, log
		s, err := sim.Start(sc, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		gcfg.WorkerURLs = append(gcfg.WorkerURLs, "grpc://"+s.Addr())
	}
	g, err := router.New(ctx, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		g.Shutdown(sctx)
	}()
	for round := 1; round <= rounds; round++ {
		rep, err := RunUnique(ctx, UniqueConfig{
			Target: lis.Addr().String(), Requests: perRound, Concurrency: 16,
			PromptBytes: 4096, OutputTokens: 32, ChatEvery: 4, Seed: uint64(round),
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK != perRound {
			t.Fatalf("round %d: %d of %d ok (codes %v, first error %q)", round, rep.OK, perRound, rep.Codes, rep.FirstError)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		path := filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", round))
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		t.Logf("round %d: %d requests, live heap %d MiB, %s", round, round*perRound, ms.HeapAlloc>>20, path)
	}
}
