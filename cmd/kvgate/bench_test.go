package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs `kvgate bench` end to end on a tiny shared-prefix
// workload: the table, the JSON, the request log and the chart are written.
func TestBenchSmoke(t *testing.T) {
	dir := t.TempDir()
	jsonPath, plotPath, reqPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg"), filepath.Join(dir, "r.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{
		"--workload", "shared-prefix", "--groups", "3", "--prompts-per-group", "4", "--system-tokens", "128",
		"--question-tokens", "16", "--output-tokens", "4", "--workers", "2", "--time-scale", "0", "--sim-seed", "3",
		"--policies", "cache_aware, round_robin", "--json", jsonPath, "--plot", plotPath, "--requests-out", reqPath,
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
	checkRequestLog(t, reqPath, map[string]int{"cache_aware": 12, "round_robin": 12}, 3)
}

// checkRequestLog reads a --requests-out file and checks that each policy
// logged its requests, each served by a worker, in the order they were
// sent, with prefixes distinct prompt heads apiece.
func checkRequestLog(t *testing.T, path string, requests map[string]int, prefixes int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Policy string  `json:"policy"`
		SentMS float64 `json:"sent_ms"`
		Prefix string  `json:"prefix"`
		Worker string  `json:"worker"`
		TTFTMS float64 `json:"ttft_ms"`
		E2EMS  float64 `json:"e2e_ms"`
		Prompt int     `json:"prompt_tokens"`
		Cached int     `json:"cached_tokens"`
		Oracle int     `json:"oracle_tokens"`
		Error  string  `json:"error"`
	}
	got := map[string]int{}
	heads := map[string]map[string]bool{}
	last := map[string]float64{}
	for i, raw := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, raw)
		}
		if l.Error != "" || !strings.HasPrefix(l.Worker, "grpc://") || l.SentMS < last[l.Policy] ||
			l.TTFTMS <= 0 || l.E2EMS < l.TTFTMS || l.Cached > l.Prompt || l.Oracle > l.Prompt || len(l.Prefix) != 16 {
			t.Errorf("line %d: %s", i+1, raw)
		}
		last[l.Policy] = l.SentMS
		got[l.Policy]++
		if heads[l.Policy] == nil {
			heads[l.Policy] = map[string]bool{}
		}
		heads[l.Policy][l.Prefix] = true
	}
	if !maps.Equal(got, requests) {
		t.Errorf("requests per policy %v, want %v", got, requests)
	}
	for p, h := range heads {
		if len(h) != prefixes {
			t.Errorf("%s: %d prefixes, want %d", p, len(h), prefixes)
		}
	}
}

// TestBenchRoutersSmoke runs `kvgate bench --routers 1,2` on a tiny
// multiturn workload: each policy runs with one router and with two, and the
// JSON says which run had how many.
func TestBenchRoutersSmoke(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{
		"--workload", "multiturn", "--users", "3", "--rounds", "3", "--multiturn-system-tokens", "64", "--question-tokens", "16",
		"--answer-tokens", "4", "--workers", "2", "--time-scale", "0", "--policies", "cache_aware,round_robin",
		"--routers", "1,2", "--json", jsonPath,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "same worker") {
		t.Errorf("table lacks the same-worker column:\n%s", stdout.String())
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Runs []struct {
			Policy         string   `json:"policy"`
			Routers        int      `json:"routers"`
			SameWorkerRate *float64 `json:"same_worker_rate"`
			Requests       int      `json:"requests"`
			Errors         int      `json:"errors"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		policy  string
		routers int
	}{{"cache_aware", 1}, {"cache_aware", 2}, {"round_robin", 1}, {"round_robin", 2}}
	if len(rep.Runs) != len(want) {
		t.Fatalf("%d runs, want %d: %s", len(rep.Runs), len(want), data)
	}
	for i, w := range want {
		r := rep.Runs[i]
		if r.Policy != w.policy || r.Routers != w.routers || r.Requests != 9 || r.Errors != 0 || r.SameWorkerRate == nil {
			t.Errorf("run %d: %+v; want %s with %d routers, 9 requests, no errors, a same-worker rate", i, r, w.policy, w.routers)
		}
	}
}

func TestBenchRoutersFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []int
	}{
		{nil, []int{1}},
		{[]string{"--routers", "2"}, []int{2}},
		{[]string{"--routers", "1,2,4"}, []int{1, 2, 4}},
		{[]string{"--routers", " 4 , 1,"}, []int{4, 1}},
		{[]string{"--routers", "1,2", "--routers", "8"}, []int{8}}, // the last one counts
	} {
		var c benchConfig
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if !slices.Equal(c.run.Routers, tt.want) {
			t.Errorf("%q: routers %v, want %v", tt.args, c.run.Routers, tt.want)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in the error; "" for any error
	}{
		{[]string{"--policies", "nope"}, ""},
		{[]string{"--policies", "round_robin:smallest_tree"}, ""},
		{[]string{"--workload", "trace"}, ""},
		{[]string{"--workload", "zipf"}, ""},
		{[]string{"--workload", "trace", "--trace", "t.jsonl", "--trace-block-tokens", "0"}, "--trace-block-tokens"},
		{[]string{"--workload", "trace", "--trace", "t.jsonl", "--trace-block-tokens", "100000"}, "--trace-block-tokens"},
		{[]string{"--workload", "unique", "--requests", "1"}, ""},         // no --target
		{[]string{"--workload", "unique", "--target", "127.0.0.1:1"}, ""}, // neither --duration nor --requests
		{[]string{"extra"}, ""},
		{[]string{"--routers", "0"}, "routers"},
		{[]string{"--routers", "1,-2"}, "routers"},
		{[]string{"--routers", "two"}, "routers"},
		{[]string{"--routers", "1.5"}, "routers"},
		{[]string{"--routers", "2,2"}, "routers"},
		{[]string{"--routers", ","}, "routers"},
		{[]string{"--routers", "2", "--target", "127.0.0.1:1"}, "--routers"},
		{[]string{"--overhead", "--prompt-tokens", "1024,x"}, "--prompt-tokens"},
		{[]string{"--overhead", "--prompt-tokens", "-8"}, "--prompt-tokens"},
		{[]string{"--overhead", "--router-args", "--kv-events off"}, "--cpu"},
		{[]string{"--overhead", "--router-pprof-addr", "127.0.0.1:6060"}, "--cpu"},
		{[]string{"--overhead", "--compare-router-args", "--kv-events off"}, "--cpu"},
		{[]string{"--overhead", "--compare-binary", "/bin/true"}, "--cpu"},
		{[]string{"--overhead", "--cpu", "--compare-router-args", "--kv-events off", "--router-pprof-addr", "127.0.0.1:6060"}, "--router-pprof-addr"},
		{[]string{"--overhead", "--cpu", "--compare-router-args", "--kv-events off", "--cpu-rounds", "0"}, "--cpu-rounds"},
	} {
		var out, errOut bytes.Buffer
		err := runBench(context.Background(), tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("bench %q: %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
}

// TestStatusLineOnlyOnATerminal: a status line rewritten in place is for a
// terminal; a file (a CI log) or a buffer gets only the per-run lines.
func TestStatusLineOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devnull, err := os.Open(os.DevNull) // a character device, yet no terminal
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	for name, w := range map[string]io.Writer{"file": f, "null device": devnull, "buffer": &strings.Builder{}} {
		if isTerminal(w) {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}
