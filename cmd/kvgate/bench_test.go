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

// TestBenchSmoke runs `kvgate bench` end to end on a tiny shared-prefix
// workload: the table, the JSON and the chart are written.
func TestBenchSmoke(t *testing.T) {
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{
		"--workload", "shared-prefix", "--groups", "3", "--prompts-per-group", "4", "--system-tokens", "128",
		"--question-tokens", "16", "--output-tokens", "4", "--workers", "2", "--time-scale", "0", "--sim-seed", "3",
		"--policies", "cache_aware, round_robin", "--json", jsonPath, "--plot", plotPath,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "round_robin") {
		t.Errorf("table lacks round_robin:\n%s", stdout.String())
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Workload string `json:"workload"`
		Runs     []struct {
			Policy   string `json:"policy"`
			Requests int    `json:"requests"`
			Errors   int    `json:"errors"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workload != "shared-prefix" || len(rep.Runs) != 2 || rep.Runs[1].Policy != "round_robin" || rep.Runs[0].Requests != 12 || rep.Runs[0].Errors != 0 {
		t.Fatalf("report %+v", rep)
	}
	if svg, err := os.ReadFile(plotPath); err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Fatalf("plot: %v %.40q", err, svg)
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--policies", "nope"},
		{"--policies", "round_robin:smallest_tree"},
		{"--workload", "trace"},
		{"--workload", "zipf"},
		{"--workload", "unique", "--requests", "1"},         // no --target
		{"--workload", "unique", "--target", "127.0.0.1:1"}, // neither --duration nor --requests
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		if err := runBench(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("bench %q: no error", args)
		}
	}
}
