package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestUnknownFlagSuggestsTheClosest: every command names the flag a typo
// most likely meant, and names none when nothing is close.
func TestUnknownFlagSuggestsTheClosest(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--cache-threshhold", "0.5"}, "unknown flag --cache-threshhold (did you mean --cache-threshold?)"},
		{[]string{"serve", "--worker-url", "x"}, "(did you mean --worker-urls?)"},
		{[]string{"serve", "--Policy", "round_robin"}, "(did you mean --policy?)"},
		{[]string{"serve", "--max-concurrent"}, "(did you mean --max-concurrent-requests?)"},
		{[]string{"serve", "--zzz"}, "unknown flag --zzz; kvgate serve -h lists the flags"},
		{[]string{"bench", "--worklaod", "multiturn"}, "unknown flag --worklaod (did you mean --workload?); kvgate bench -h"},
		{[]string{"sim", "--protocl", "vllm"}, "unknown flag --protocl (did you mean --protocol?); kvgate sim -h"},
		{[]string{"relay", "--upstrem", "x:1"}, "unknown flag --upstrem (did you mean --upstream?); kvgate relay -h"},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a row whose flag parses must not start serving
		err := run(ctx, tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestClosestFlag pins the distance rule: about one edit in three
// characters, a unique prefix, and nothing for names far from every flag.
func TestClosestFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	for _, name := range []string{"policy", "port", "prometheus-port", "worker-urls", "max-concurrent-requests", "max-queue-size"} {
		fs.String(name, "", "")
	}
	tests := []struct{ typo, want string }{
		{"polcy", "policy"},
		{"prot", "port"}, // a swap of two neighbours is one edit
		{"plicy", "policy"},
		{"poilcy", "policy"},
		{"prometheus-prot", "prometheus-port"},
		{"worker-url", "worker-urls"},
		{"max-concurrent", "max-concurrent-requests"},
		{"max", ""}, // a prefix of two flags names neither
		{"x", ""},
		{"", ""},
		{"totally-different", ""},
	}
	for _, tc := range tests {
		if got := closestFlag(fs, tc.typo); got != tc.want {
			t.Errorf("closestFlag(%q) = %q, want %q", tc.typo, got, tc.want)
		}
	}
}

// TestHelpIsNotAnError: -h prints the flags and reports flag.ErrHelp, which
// main turns into exit status 0.
func TestHelpIsNotAnError(t *testing.T) {
	for _, cmd := range []string{"serve", "bench", "sim", "relay"} {
		var out strings.Builder
		err := run(context.Background(), []string{cmd, "-h"}, &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: err = %v, want flag.ErrHelp", cmd, err)
		}
		if !strings.Contains(out.String(), "Usage of kvgate "+cmd+":") || !strings.Contains(out.String(), "  -") {
			t.Errorf("%s -h printed %q, want the usage line and the flags", cmd, out.String())
		}
	}
}
