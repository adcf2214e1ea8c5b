package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPeerRuns: how --policies expands beside --peers smg, and what it
// refuses before anything starts.
func TestPeerRuns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []string
		peers    []string
		want     []string
		wantErr  string
	}{
		{name: "plain names alternate the routers", policies: []string{"cache_aware", "round_robin"}, peers: []string{PeerSMG},
			want: []string{"kvgate:cache_aware", "smg:cache_aware", "kvgate:round_robin", "smg:round_robin"}},
		{name: "a prefix runs one router", policies: []string{"smg:prefix_hash", "kvgate:bucket"}, peers: []string{PeerSMG},
			want: []string{"smg:prefix_hash", "kvgate:bucket"}},
		{name: "pooled and variants stay in this process", policies: []string{"pooled", "cache_aware:cost"}, peers: []string{PeerSMG},
			want: []string{"pooled", "cache_aware:cost"}},
		{name: "an unknown peer", policies: []string{"cache_aware"}, peers: []string{"vllm-router"}, wantErr: "the peer kvgate knows is smg"},
		{name: "a policy SMG lacks here", policies: []string{"bucket"}, peers: []string{PeerSMG}, wantErr: "name kvgate:bucket"},
		{name: "an unknown SMG policy", policies: []string{"smg:manual"}, peers: []string{PeerSMG}, wantErr: "smg runs here with"},
		{name: "an unknown kvgate policy", policies: []string{"fastest"}, peers: []string{PeerSMG}, wantErr: "unknown policy"},
		{name: "a variant in a kvgate process", policies: []string{"kvgate:cache_aware"}, peers: []string{PeerSMG}, want: []string{"kvgate:cache_aware"}},
		{name: "kvgate serve takes no variant", policies: []string{"kvgate:cache_aware:cost"}, peers: []string{PeerSMG}, wantErr: "plain policy name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PeerRuns(tc.policies, tc.peers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PeerRuns(%v) error %v, want one saying %q", tc.policies, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("PeerRuns(%v) = %v, %v; want %v", tc.policies, got, err, tc.want)
			}
		})
	}
}

// smgBin finds SMG's launcher: $KVGATE_SMG_BIN, smg on PATH, or where
// `make smg` installs it.
func smgBin() string {
	if p := os.Getenv("KVGATE_SMG_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("smg"); err == nil {
		return p
	}
	cache := os.Getenv("KVGATE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "kvgate")
	}
	p := filepath.Join(cache, "smg-venv", "bin", "smg")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// TestPeersSMG runs a small shared-prefix workload through kvgate serve and
// SMG, each a process in front of two simulated engines, with cache_aware
// and round_robin: every request succeeds through both, both routers relay
// the engines' own cached-token counts, round_robin spreads the requests
// evenly on both (so the peer really routed with the policy named), and
// each router's CPU, memory and throughput are measured.
func TestPeersSMG(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("builds kvgate and starts routers as processes")
	}
	if raceDetector {
		t.Skip("each simulated engine parses Llama 3's tokenizer, minutes under the race detector; make smg-test runs this test without it")
	}
	smg := smgBin()
	if smg == "" {
		t.Skip("SMG is not installed: make smg installs it (smg 1.13.0 from PyPI) into $(KVGATE_CACHE)/smg-venv; or set KVGATE_SMG_BIN")
	}
	tok, err := filepath.Abs("../tokenize/testdata/tokenizers/llama3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tok, "tokenizer.json")); err != nil {
		t.Skipf("Llama 3's tokenizer files are not in this checkout (%v)", err)
	}
	exe := buildKvgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	wc := DefaultWorkloadConfig()
	wc.Name, wc.Groups, wc.PromptsPerGroup, wc.SystemTokens, wc.QuestionTokens, wc.OutputTokens = SharedPrefix, 4, 8, 512, 32, 8
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := Config{Policies: []string{"cache_aware", "round_robin"}, Workers: 2, Sim: SimConfig(), Concurrency: 8, Seed: 1}
	cfg.Sim.TimeScale = 0.05
	pc := PeerConfig{Peers: []string{PeerSMG}, SMGBin: smg, Executable: exe, TokenizerDir: tok,
		ThroughputDuration: time.Second, ThroughputConcurrency: 8, Stderr: &logs}
	rep, err := RunPeers(ctx, cfg, pc, wl)
	if err != nil {
		t.Fatalf("RunPeers: %v\nrouters' logs:\n%s", err, logs.String())
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	want := []string{"kvgate:cache_aware", "smg:cache_aware", "kvgate:round_robin", "smg:round_robin"}
	if len(rep.Runs) != len(want) {
		t.Fatalf("%d runs, want %v", len(rep.Runs), want)
	}
	for i, r := range rep.Runs {
		if r.Policy != want[i] {
			t.Errorf("run %d is %q, want %q", i, r.Policy, want[i])
		}
		if r.Requests != wl.Size() || r.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors; want %d, none", r.Policy, r.Requests, r.Errors, wl.Size())
		}
		c := r.Router
		if c == nil || c.PeakRSSMiB <= 0 || c.CPUSecondsPer1K < 0 {
			t.Errorf("%s: router cost %+v, want its process's CPU and peak memory", r.Policy, c)
			continue
		}
		if c.EngineCacheHitRate <= 0 || c.EngineCacheHitRate != r.CacheHitRate {
			t.Errorf("%s: the router reported hit rate %v, the engines counted %v", r.Policy, r.CacheHitRate, c.EngineCacheHitRate)
		}
		if strings.HasSuffix(r.Policy, ":round_robin") && r.LoadCoV != 0 {
			t.Errorf("%s: load CoV %v; round_robin sends %d requests to 2 engines evenly", r.Policy, r.LoadCoV, wl.Size())
		}
	}
	if len(rep.Throughput) != 2 {
		t.Fatalf("throughput runs %+v, want kvgate's and smg's", rep.Throughput)
	}
	for i, th := range rep.Throughput {
		if th.Router != []string{"kvgate:cache_aware", "smg:cache_aware"}[i] || th.RequestsPerSec <= 0 || th.Errors != 0 {
			t.Errorf("throughput %+v", th)
		}
	}
}

// TestPeersSMGTarget: `kvgate bench --target HOST:PORT --target-front smg`
// measures an SMG already running (as in front of real engines), through its
// HTTP /generate with token ids: every request succeeds, the run carries the
// label given, and the cached tokens SMG relays are the engines' own.
func TestPeersSMGTarget(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("starts SMG as a process")
	}
	if raceDetector {
		t.Skip("each simulated engine parses Llama 3's tokenizer, minutes under the race detector; make smg-test runs this test without it")
	}
	smg := smgBin()
	if smg == "" {
		t.Skip("SMG is not installed: make smg installs it (smg 1.13.0 from PyPI) into $(KVGATE_CACHE)/smg-venv; or set KVGATE_SMG_BIN")
	}
	tok, err := filepath.Abs("../tokenize/testdata/tokenizers/llama3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tok, "tokenizer.json")); err != nil {
		t.Skipf("Llama 3's tokenizer files are not in this checkout (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wc := DefaultWorkloadConfig()
	wc.Name, wc.Groups, wc.PromptsPerGroup, wc.SystemTokens, wc.QuestionTokens, wc.OutputTokens = SharedPrefix, 2, 6, 256, 16, 4
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0.05
	var logs bytes.Buffer
	pc := PeerConfig{SMGBin: smg, TokenizerDir: tok, Stderr: &logs}
	f, err := startPeerFleet(ctx, pc, peerRun{PeerSMG, "cache_aware"}, 2, sc)
	if err != nil {
		t.Fatalf("starting SMG in front of 2 engines: %v\n%s", err, logs.String())
	}
	defer f.close()
	addr := strings.TrimPrefix(f.front.(*smgFront).url, "http://")

	cfg := Config{Target: addr, TargetFront: PeerSMG, TargetModel: sc.Model, TargetLabel: "smg:cache_aware", Concurrency: 4, Seed: 1}
	rep, err := Run(ctx, cfg, wl)
	if err != nil {
		t.Fatalf("Run against SMG at %s: %v\n%s", addr, err, logs.String())
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.Policy != "smg:cache_aware" || r.Requests != wl.Size() || r.Errors != 0 {
		t.Fatalf("run %q: %d requests, %d errors; want smg:cache_aware, %d, none", r.Policy, r.Requests, r.Errors, wl.Size())
	}
	_, prompt, cached := f.engineCounts()
	if want := float64(cached) / float64(prompt); cached == 0 || r.CacheHitRate != want {
		t.Errorf("SMG relayed a hit rate of %v, the engines counted %v (%d of %d prompt tokens)", r.CacheHitRate, want, cached, prompt)
	}
}
