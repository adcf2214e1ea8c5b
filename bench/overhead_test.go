package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunOverheadSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engines and a router")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := OverheadConfig{PromptTokens: []int{64}, Requests: 50, Warmup: 5, Concurrency: 8, Duration: 300 * time.Millisecond}
	var out bytes.Buffer
	start := time.Now()
	rep, err := RunOverhead(ctx, cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("took %s\n%s", time.Since(start), out.String())
	if len(rep.Cases) != 2 {
		t.Fatalf("cases = %+v, want one per input kind", rep.Cases)
	}
	for i, want := range []string{OverheadInputTokens, OverheadInputTextL1Hit} {
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
