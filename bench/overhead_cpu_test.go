package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
)

func TestProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	c0, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's counter moves (it counts in 10 ms ticks).
	x := 0
	testutil.EventuallyState(t, testutil.Patience, "the process's CPU time to grow", func() (bool, string) {
		for i := range 1_000_000 {
			x += i
		}
		c1, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return c1 > c0, fmt.Sprintf("%v, from %v (%d)", c1, c0, x)
	})
}

func TestProcessCPUNoProcess(t *testing.T) {
	if _, err := processCPU(-1); err == nil {
		t.Error("processCPU(-1) succeeded")
	}
}

// buildKvgate builds the kvgate binary into a temporary directory.
func buildKvgate(t testing.TB) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "kvgate")
	build := exec.Command("go", "build", "-o", exe, "github.com/kvgate/kvgate/cmd/kvgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// TestRunOverheadCPUSmall builds kvgate and runs the CPU measurement on
// short prompts with a tiny budget: the rig starts, every case's cache
// check passes, and the table is printed.
func TestRunOverheadCPUSmall(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("builds kvgate and starts a router and an engine as processes")
	}
	exe := buildKvgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, logs bytes.Buffer
	cfg := OverheadCPUConfig{Executable: exe, PromptTokens: []int{256}, Concurrency: 2, Budget: 30 * time.Millisecond,
		MaxRequests: 300, Warmup: 5, ThroughputConcurrency: 4, Duration: 300 * time.Millisecond, Stderr: &logs}
	rep, err := RunOverheadCPU(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("%v\nlogs:\n%s", err, logs.String())
	}
	t.Logf("\n%s", out.String())
	want := []string{OverheadInputTokens, OverheadInputRelay, OverheadInputTextMiss, OverheadInputTextL0Hit, OverheadInputTextL1Hit}
	if len(rep.Cases) != len(want) {
		t.Fatalf("cases = %+v, want %v", rep.Cases, want)
	}
	for i, c := range rep.Cases {
		if c.Input != want[i] || c.Requests <= 0 || c.RouterCPUus < 0 || c.PerSec <= 0 || c.PromptTokens < 200 {
			t.Errorf("case %d = %+v, want input %q with requests, rates and about 256 prompt tokens", i, c, want[i])
		}
	}
	if rep.Throughput <= 0 || rep.RelayThroughput.PerSec <= 0 {
		t.Errorf("throughput %v requests/s through the router, %v through the relay", rep.Throughput, rep.RelayThroughput.PerSec)
	}
	if !strings.Contains(out.String(), "router CPU µs/request") {
		t.Errorf("table lacks its header:\n%s", out.String())
	}
}

// TestRunOverheadCPUAlternatingSmall builds kvgate and runs the fronts
// taking turns on short prompts: every front serves every round, the
// table and the ratios are printed, and a second router's flags reach it
// (one it refuses fails the run, naming that front).
func TestRunOverheadCPUAlternatingSmall(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("builds kvgate and starts routers, a relay and engines as processes")
	}
	exe := buildKvgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, logs bytes.Buffer
	cfg := OverheadAltConfig{
		OverheadCPUConfig: OverheadCPUConfig{Executable: exe, PromptTokens: []int{256}, Concurrency: 2, Warmup: 5, Stderr: &logs},
		Fronts: []OverheadFront{
			{Label: "on"},
			{Label: "off", RouterArgs: []string{"--kv-events", "off"}},
			{Label: "relay", Relay: true},
		},
		Rounds: 3, Batch: 600,
	}
	rep, err := RunOverheadCPUAlternating(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("%v\nlogs:\n%s", err, logs.String())
	}
	t.Logf("\n%s", out.String())
	if len(rep.CPU) != 1 || len(rep.CPU[0]) != 3 {
		t.Fatalf("CPU = %v, want one prompt length of three fronts", rep.CPU)
	}
	for f, rounds := range rep.CPU[0] {
		if len(rounds) != 3 {
			t.Errorf("front %s ran %d rounds, want 3", rep.Fronts[f], len(rounds))
		}
		for _, us := range rounds {
			if us <= 0 {
				t.Errorf("front %s: %v µs per request", rep.Fronts[f], us)
			}
		}
	}
	for _, want := range []string{"on ÷ off", "on ÷ relay", "off ÷ relay", "kvgate serve --kv-events off"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	cfg.Fronts[1].RouterArgs = []string{"--no-such-flag"}
	if _, err := RunOverheadCPUAlternating(ctx, cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "front off") {
		t.Errorf("a second router with a flag it refuses: %v, want an error naming front off", err)
	}
}
