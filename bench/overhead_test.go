package bench

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRunOverheadSmall runs the latency table on short prompts, with the
// router and engine in this process and as processes of their own: each
// case's latencies are sane, the text case hits the router's L1 cache (its
// own check), and the table is printed.
func TestRunOverheadSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engines and a router")
	}
	for _, processes := range []bool{false, true} {
		t.Run(fmt.Sprintf("processes=%v", processes), func(t *testing.T) {
			if processes && runtime.GOOS != "linux" {
				t.Skip("the process rig reads /proc")
			}
			cfg := OverheadConfig{PromptTokens: []int{64}, Requests: 50, Warmup: 5, Concurrency: 8, Duration: 300 * time.Millisecond}
			var logs bytes.Buffer
			if processes {
				cfg.Executable, cfg.Stderr = buildKvgate(t), &logs
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			start := time.Now()
			rep, err := RunOverhead(ctx, cfg, &out)
			if err != nil {
				t.Fatalf("%v\nlogs:\n%s", err, logs.String())
			}
			t.Logf("took %s\n%s", time.Since(start), out.String())
			inputs := []string{OverheadInputTokens, OverheadInputTextL1Hit}
			if processes {
				inputs = []string{OverheadInputTokens, OverheadInputRelay, OverheadInputTextL1Hit}
			}
			if len(rep.Cases) != len(inputs) {
				t.Fatalf("cases = %+v, want %v", rep.Cases, inputs)
			}
			for i, want := range inputs {
				c := rep.Cases[i]
				if c.Input != want || c.PromptTokens != 64 {
					t.Errorf("case %d = %+v, want input %q at 64 tokens", i, c, want)
				}
				if !(c.DirectP50us > 0 && c.RouterP50us > 0 && c.DirectP99us >= c.DirectP50us && c.RouterP99us >= c.RouterP50us) {
					t.Errorf("case %d latencies not sane: %+v", i, c)
				}
				if c.AddedP50us != c.RouterP50us-c.DirectP50us || c.AddedP99us != c.RouterP99us-c.DirectP99us {
					t.Errorf("case %d added latency is not router - direct: %+v", i, c)
				}
			}
			if !(rep.MaxRequestsPerSec > 0 && rep.EngineRequestsPerSec > 0) {
				t.Errorf("throughput router %v, engine %v requests/s", rep.MaxRequestsPerSec, rep.EngineRequestsPerSec)
			}
			for _, s := range []string{"text-l1-hit", "added p99", "requests/s"} {
				if !strings.Contains(out.String(), s) {
					t.Errorf("table lacks %q", s)
				}
			}
			if processes != strings.Contains(out.String(), "a process of its own") {
				t.Errorf("the table does not say where the router ran (processes=%v):\n%s", processes, out.String())
			}
		})
	}
}

func TestOverheadPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[99-i] = time.Duration(i+1) * time.Microsecond
	}
	if p := ovhPercentileUs(ds, 50); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := ovhPercentileUs(ds, 99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := ovhPercentileUs(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}
