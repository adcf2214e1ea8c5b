package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchSpeedSweep runs `kvgate bench` on a few trace requests at two
// speeds: each speed's table, the summary with its SLO, the JSON of both
// points and a chart with one line per policy in each of its three panels.
func TestBenchSpeedSweep(t *testing.T) {
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "s.json"), filepath.Join(dir, "s.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{
		"--workload", "trace", "--trace", filepath.Join("..", "..", "bench", "testdata", "traces", "synthetic_trace.jsonl"),
		"--requests", "8", "--workers", "2", "--time-scale", "0", "--speed", "100, 200", "--slo-ttft", "1500ms",
		"--policies", "cache_aware,round_robin", "--json", jsonPath, "--plot", plotPath,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"speed 100\n", "speed 200\n", "SLO of 1.5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var sw struct {
		SLO    float64 `json:"slo_ttft_ms"`
		Points []struct {
			Speed  float64 `json:"speed"`
			Report struct {
				Runs []struct {
					Policy   string `json:"policy"`
					Requests int    `json:"requests"`
				} `json:"runs"`
			} `json:"report"`
		} `json:"points"`
	}
	if err := json.Unmarshal(data, &sw); err != nil {
		t.Fatal(err)
	}
	if sw.SLO != 1500 || len(sw.Points) != 2 || sw.Points[1].Speed != 200 || len(sw.Points[1].Report.Runs) != 2 || sw.Points[1].Report.Runs[0].Requests != 8 {
		t.Fatalf("sweep JSON %s", data)
	}
	svg, err := os.ReadFile(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"cache_aware", "round_robin"} {
		if n := bytes.Count(svg, []byte(`data-series="`+policy+`"`)); n != 3 {
			t.Errorf("%s: %d lines in the chart, want 3 (p50, p99, goodput)", policy, n)
		}
	}
}

// TestBenchSpeedRefusals: --speed and --slo-ttft values that cannot make a
// sweep are refused before anything runs, naming the flag.
func TestBenchSpeedRefusals(t *testing.T) {
	trace := filepath.Join("..", "..", "bench", "testdata", "traces", "synthetic_trace.jsonl")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a speed of 0", []string{"--workload", "trace", "--trace", trace, "--speed", "0"}, "must be > 0"},
		{"a speed twice", []string{"--workload", "trace", "--trace", trace, "--speed", "2,2"}, "listed twice"},
		{"not a number", []string{"--workload", "trace", "--trace", trace, "--speed", "fast"}, "not a number"},
		{"several speeds without a trace", []string{"--workload", "multiturn", "--speed", "2,3"}, "need --workload trace"},
		{"several speeds with --peers", []string{"--workload", "trace", "--trace", trace, "--speed", "2,3", "--peers", "smg"}, "--peers"},
		{"several speeds with a request log", []string{"--workload", "trace", "--trace", trace, "--speed", "2,3", "--requests-out", "r.jsonl"}, "--requests-out"},
		{"an SLO of 0", []string{"--workload", "trace", "--trace", trace, "--speed", "2,3", "--slo-ttft", "0s"}, "--slo-ttft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runBench(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
				t.Fatalf("err %v (stderr %q), want one saying %q", err, stderr.String(), tc.want)
			}
		})
	}
}
