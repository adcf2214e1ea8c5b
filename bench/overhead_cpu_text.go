package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// textCases measures the three text cases at about n tokens: a miss, an L0
// hit and an L1 hit of the router's tokenizer caches, each checked against
// the router's counters, so that a figure is never labelled with a cache
// level it did not exercise.
func (r *cpuRig) textCases(ctx context.Context, cfg OverheadCPUConfig, n int) ([]OverheadCPUCase, error) {
	base, err := ovhProse(r.ref, n, uint64(n))
	if err != nil {
		return nil, err
	}
	// A miss starts with a word drawn at random, then its number: texts that
	// all began with the same token would make the routing tree's root scan
	// every earlier text among its children (tree keys children by their
	// first token), a cost of the tree that grows with the run, not of
	// tokenizing.
	missRng := rand.New(rand.NewPCG(uint64(n), 5))
	miss, err := r.run(ctx, cfg, OverheadInputTextMiss, cfg.Concurrency, func(i int) *kvgatev1.GenerateRequest {
		w := ovhWords[missRng.IntN(len(ovhWords))]
		return ovhRouterRequest(nil, fmt.Sprintf("%s %d.%s", strings.ToUpper(w[:1])+w[1:], i, base))
	}, func(d cacheCounts, _ int) error {
		if d.l0 > 0 || d.l1 > 0 {
			return fmt.Errorf("the router's caches hit (L0 %v, L1 %v times) on texts that are all new", d.l0, d.l1)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", OverheadInputTextMiss, err)
	}

	same := ovhRouterRequest(nil, "Always the same."+base)
	l0, err := r.run(ctx, cfg, OverheadInputTextL0Hit, cfg.Concurrency, func(int) *kvgatev1.GenerateRequest { return same },
		func(d cacheCounts, n int) error {
			if d.l0 < float64(n) {
				return fmt.Errorf("the router's L0 cache hit %v times in %d requests of one text", d.l0, n)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", OverheadInputTextL0Hit, err)
	}

	conv, err := newOvhConversation(r.ref, n, uint64(n))
	if err != nil {
		return nil, err
	}
	// Variants are written before the clock starts: writing one encodes its
	// last turn word by word, client work that would slow the clients.
	const pool = 512
	reqs := make([]*kvgatev1.GenerateRequest, pool)
	for i := range reqs {
		v, err := conv.variant(i)
		if err != nil {
			return nil, err
		}
		reqs[i] = ovhRouterRequest(nil, v.text)
	}
	// The router keeps each whole text in L0; with the pool cycling, a text
	// seen before hits L0 instead. Each request gets its own first line in
	// the last turn: "user\nQuestion i:" is rewritten to a number of its own.
	l1, err := r.run(ctx, cfg, OverheadInputTextL1Hit, cfg.Concurrency, func(i int) *kvgatev1.GenerateRequest {
		req := reqs[i%pool]
		text := strings.Replace(req.GetText(), fmt.Sprintf("user\nQuestion %d:", i%pool), fmt.Sprintf("user\nQuestion %d:", i), 1)
		return ovhRouterRequest(nil, text)
	}, func(d cacheCounts, n int) error {
		if d.l0 > 0 || d.l1 < float64(n) {
			return fmt.Errorf("the router's caches hit L0 %v and L1 %v times in %d requests; want L1 every time, L0 never", d.l0, d.l1, n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", OverheadInputTextL1Hit, err)
	}
	return []OverheadCPUCase{miss, l0, l1}, nil
}

// ovhProse is about n tokens of words without special tokens. It is sized
// from the tokens per word of a sample, then checked once.
func ovhProse(ref interface {
	Encode(string, bool) ([]uint32, error)
}, n int, seed uint64) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 4))
	var b strings.Builder
	words := func(k int) {
		for range k {
			b.WriteString(" " + ovhWords[rng.IntN(len(ovhWords))])
		}
	}
	sample := min(256, n/2)
	words(sample)
	ids, err := ref.Encode(b.String(), false)
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", errors.New("the tokenizer encodes prose as nothing")
	}
	words(max(0, n*sample/len(ids)-sample))
	return b.String(), nil
}
