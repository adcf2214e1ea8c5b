package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/kvgate/kvgate/bench"
)

// defaultPeerTokenizer is Llama 3's tokenizer among the repository's test
// files, found when `kvgate bench` runs from the repository's root.
const defaultPeerTokenizer = "tokenize/testdata/tokenizers/llama3"

// peerList is --peers, split on commas.
func (c *benchConfig) peerList() []string {
	var out []string
	for _, p := range strings.Split(c.peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkPolicies checks --policies before anything starts: with --peers,
// against the routers that run them.
func (c *benchConfig) checkPolicies() error {
	if c.peers == "" {
		for _, p := range c.run.Policies {
			if _, _, err := bench.ParsePolicy(p); err != nil {
				return err
			}
		}
		return nil
	}
	if c.run.Target != "" {
		return errors.New("--peers starts its own routers; it cannot measure a --target")
	}
	_, err := bench.PeerRuns(c.run.Policies, c.peerList())
	return err
}

// runPeers runs wl with kvgate and the --peers routers side by side.
func (c *benchConfig) runPeers(ctx context.Context, wl *bench.Workload, stderr io.Writer) (*bench.Report, error) {
	pc := c.peer
	pc.Peers = c.peerList()
	pc.Stderr = stderr
	pc.ServeArgs = c.serveArgs()
	var err error
	if pc.Executable, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("--peers runs kvgate serve from this binary: %w", err)
	}
	if pc.SMGBin == "" {
		if pc.SMGBin, err = exec.LookPath("smg"); err != nil {
			return nil, fmt.Errorf("--peers smg: no smg on PATH (make smg installs SMG from PyPI; pass its launcher as --smg-bin): %w", err)
		}
	}
	if _, err := os.Stat(pc.TokenizerDir); err != nil {
		return nil, fmt.Errorf("--peer-tokenizer: %w (the workloads' token ids are Llama 3's: give the directory of its tokenizer.json)", err)
	}
	runs, err := bench.PeerRuns(c.run.Policies, pc.Peers)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "kvgate bench: %s, %d requests, runs %s, %d simulated engines each\n", wl.Name, wl.Size(), strings.Join(runs, ","), c.run.Workers)
	return bench.RunPeers(ctx, c.run, pc, wl)
}

// writeGoodput prints each run's goodput against slo after the peers'
// table: the routers are compared under overload by how many requests a
// person would not have given up on, not only by percentiles.
func writeGoodput(w io.Writer, rep *bench.Report, slo time.Duration) error {
	for _, r := range rep.Runs {
		per, share := r.Goodput(slo)
		if _, err := fmt.Fprintf(w, "goodput %s: %.2f requests/s with TTFT <= %v (%.1f%% of those sent)\n", r.Policy, per, slo, 100*share); err != nil {
			return err
		}
	}
	return nil
}
