package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/workers/sim"
)

func TestUniqueText(t *testing.T) {
	seen := map[string]bool{}
	for i := range 100 {
		s := uniqueText(0xabc, 1, i, 300)
		if len(s) != 300 {
			t.Fatalf("prompt %d is %d bytes, want 300", i, len(s))
		}
		if s != uniqueText(0xabc, 1, i, 300) {
			t.Fatalf("prompt %d differs between calls", i)
		}
		// Unique from the first bytes on, so no two prompts share a tree path.
		head := strings.SplitN(s, " ", 2)[0]
		if seen[head] {
			t.Fatalf("prompt %d starts like an earlier one: %q", i, head)
		}
		seen[head] = true
	}
	if uniqueText(0xabc, 1, 0, 300)[:8] == uniqueText(0xabd, 1, 0, 300)[:8] {
		t.Error("two runs (nonces) share a prompt's start")
	}
}

func TestRunUniqueEndToEnd(t *testing.T) {
	sc := sim.DefaultConfig() // the built-in tokenizer, so the router takes text and Chat
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := StartTestbed(ctx, "manual", 2, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := RunUnique(ctx, UniqueConfig{
		Target: f.Addr, Requests: 20, Concurrency: 4, PromptBytes: 512, OutputTokens: 3, ChatEvery: 2, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 20 || rep.OK != 20 || rep.Refused != 0 {
		t.Fatalf("sent %d, ok %d, refused %d (codes %v, first error %q); want 20, 20, 0", rep.Sent, rep.OK, rep.Refused, rep.Codes, rep.FirstError)
	}
	if rep.TTFT.P50 <= 0 || rep.E2E.P99 < rep.TTFT.P50 {
		t.Errorf("TTFT %+v, E2E %+v", rep.TTFT, rep.E2E)
	}
	if _, err := RunUnique(ctx, UniqueConfig{Target: f.Addr, Concurrency: 1}); err == nil {
		t.Error("neither duration nor requests: no error")
	}
}

// TestTargetVocabularyProbe: a token workload sent to a router whose engines
// have a smaller vocabulary stops before the run with an error that says
// what to do; engines with Llama 3's vocabulary take it.
func TestTargetVocabularyProbe(t *testing.T) {
	small := sim.DefaultConfig() // the built-in tokenizer's 2,059 ids
	small.TimeScale = 0
	large := SimConfig()
	large.TimeScale = 0
	tests := []struct {
		name    string
		sim     sim.Config
		wantErr string // "" for a run that completes
	}{
		{"engines with a small vocabulary", small, "--workload unique"},
		{"engines with Llama 3's vocabulary", large, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			f, err := StartTestbed(ctx, "round_robin", 2, tt.sim)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			wl, err := Generate(tinyConfig(SharedPrefix))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(ctx, Config{Target: f.Addr, Seed: 1}, wl)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case len(rep.Runs) != 1 || rep.Runs[0].Errors != 0:
				t.Fatalf("runs %+v, want one without errors", rep.Runs)
			}
		})
	}
}
