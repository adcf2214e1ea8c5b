package bench

// The measurements of RunOverhead: paired latencies, the text case's
// conversation, throughput, and the printed table.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// ovhPair is one iteration's two requests: ids for the engine, and the
// equivalent request for the router.
type ovhPair struct {
	ids []uint32
	req *kvgatev1.GenerateRequest
}

// ovhPaths are the two ways a latency case sends its requests: straight to
// the engine and through the router in front of it. The in-process rig
// (overheadRig) and the rig of child processes (cpuRig) both provide them.
type ovhPaths interface {
	// sendDirect sends ids straight to the engine and returns the time
	// until the completion arrived and its prompt token count.
	sendDirect(ctx context.Context, ids []uint32) (time.Duration, int, error)
	// sendRouter sends req through the router, likewise.
	sendRouter(ctx context.Context, req *kvgatev1.GenerateRequest) (time.Duration, int, error)
	// cacheHits are the router's tokenizer-cache hit counts so far.
	cacheHits(ctx context.Context) (cacheCounts, error)
	// reference is the engine's tokenizer without caches (nil for an
	// engine without one), to write texts and their ids.
	reference() *textmodel.Model
}

// measure runs warmup then cfg.Requests iterations of next, each sending its
// pair to the engine and to the router one after the other (the order
// alternates), and returns the two latency samples.
func measure(ctx context.Context, r ovhPaths, cfg OverheadConfig, next func(i int) (ovhPair, error)) (direct, routed []time.Duration, err error) {
	direct = make([]time.Duration, 0, cfg.Requests)
	routed = make([]time.Duration, 0, cfg.Requests)
	for i := range cfg.Warmup + cfg.Requests {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		p, err := next(i)
		if err != nil {
			return nil, nil, err
		}
		var dd, rd time.Duration
		var dn, rn int
		var derr, rerr error
		if i%2 == 0 {
			dd, dn, derr = r.sendDirect(ctx, p.ids)
			rd, rn, rerr = r.sendRouter(ctx, p.req)
		} else {
			rd, rn, rerr = r.sendRouter(ctx, p.req)
			dd, dn, derr = r.sendDirect(ctx, p.ids)
		}
		if err := errors.Join(derr, rerr); err != nil {
			return nil, nil, err
		}
		if dn != rn || dn != len(p.ids) {
			return nil, nil, fmt.Errorf("request %d: the engine counted %d prompt tokens straight and %d through the router; %d were sent", i, dn, rn, len(p.ids))
		}
		if i >= cfg.Warmup {
			direct, routed = append(direct, dd), append(routed, rd)
		}
	}
	return direct, routed, nil
}

// tokenCase: fresh random prompts of n token ids, a different one for each
// request, so that the engine and the router's tree see the same work on
// both paths (a miss, then an insertion).
func tokenCase(ctx context.Context, r ovhPaths, cfg OverheadConfig, n int) (OverheadCase, error) {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	prompt := func() []uint32 { return freshIDs(rng, n) }
	// Same length, different ids: neither path benefits from the other's cache.
	direct, routed, err := measure(ctx, r, cfg, func(int) (ovhPair, error) {
		return ovhPair{ids: prompt(), req: ovhRouterRequest(prompt(), "")}, nil
	})
	if err != nil {
		return OverheadCase{}, fmt.Errorf("overhead, %d-token ids: %w", n, err)
	}
	return newOvhCase(OverheadInputTokens, n, direct, routed), nil
}

// textCase: a multi-turn ChatML conversation of about n tokens whose prefix,
// up to its last special token, is in the router's L1 cache; only the last
// user turn changes from request to request, so L0 misses and L1 hits. The
// engine gets the same conversation's token ids, computed without the caches.
func textCase(ctx context.Context, r ovhPaths, cfg OverheadConfig, n int) (OverheadCase, error) {
	fail := func(err error) (OverheadCase, error) {
		return OverheadCase{}, fmt.Errorf("overhead, %d-token text: %w", n, err)
	}
	ref := r.reference()
	conv, err := newOvhConversation(ref, n, uint64(n))
	if err != nil {
		return fail(err)
	}
	// Put the prefix in L1: one request through the router.
	seed, err := conv.variant(-1)
	if err != nil {
		return fail(err)
	}
	if _, _, err := r.sendRouter(ctx, ovhRouterRequest(nil, seed.text)); err != nil {
		return fail(err)
	}
	// Check once that the composed ids are the tokenizer's own.
	whole, err := ref.Encode(seed.text, true)
	if err != nil {
		return fail(err)
	}
	if !slices.Equal(whole, seed.ids) {
		return fail(errors.New("the conversation's ids do not compose at its last special token"))
	}

	before, err := r.cacheHits(ctx)
	if err != nil {
		return fail(err)
	}
	direct, routed, err := measure(ctx, r, cfg, func(i int) (ovhPair, error) {
		v, err := conv.variant(i)
		return ovhPair{ids: v.ids, req: ovhRouterRequest(nil, v.text)}, err
	})
	if err != nil {
		return fail(err)
	}
	after, err := r.cacheHits(ctx)
	if err != nil {
		return fail(err)
	}
	d, total := after.minus(before), float64(cfg.Warmup+cfg.Requests)
	if d.l1 < total {
		return fail(fmt.Errorf("the router's L1 cache hit %v times in %v requests", d.l1, total))
	}
	if d.l0 > 0 {
		return fail(fmt.Errorf("the router's L0 cache hit %v times; every text should be new", d.l0))
	}
	return newOvhCase(OverheadInputTextL1Hit, n, direct, routed), nil
}

// ovhConversation is a ChatML conversation cut after the last <|im_start|>: the
// head, whose ids are known, and a last user turn written per request.
type ovhConversation struct {
	ref      *textmodel.Model
	head     string
	headIDs  []uint32
	tailToks int // target length of the last turn
	seed     uint64
}

type ovhVariant struct {
	text string
	ids  []uint32
}

var ovhWords = strings.Fields(`the a of to and in is it that for on with as was at by be this from or
an are not have but had they which one you were her all she there would their we him been has when who
will more no if out so said what up its about into than them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before must
through back years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used take three
cache router token prefix prompt engine worker latency request model page tree memory decode prefill batch
sequence attention layer weight kernel server client stream queue policy balance load throughput answer`)

// newOvhConversation writes a system prompt and user/assistant turns until the
// whole, with a last turn of about n/16 tokens, holds about n tokens. The
// text is counted message by message: encoding splits at special tokens, so
// a message's count does not depend on the text before its <|im_start|>
// (encoding the whole head at each step was quadratic, minutes at 64K).
func newOvhConversation(ref *textmodel.Model, n int, seed uint64) (*ovhConversation, error) {
	c := &ovhConversation{ref: ref, seed: seed, tailToks: min(max(n/16, 8), 128)}
	rng := rand.New(rand.NewPCG(seed, 2))
	target := n - c.tailToks
	const closing = "<|im_end|>\n<|im_start|>"
	var head, msg strings.Builder // head: the closed messages; msg: the open one
	msg.WriteString("<|im_start|>system\nYou are a helpful assistant.")
	headToks := 0
	roles := []string{"user", "assistant"}
	count := func(s string) (int, error) {
		ids, err := ref.Encode(s, true)
		return len(ids), err
	}
	for turn := 0; ; turn++ {
		// Add words to the current message until the turn is long enough or
		// the head reaches its target length.
		m := 0
		for k := 0; k < 96; k++ {
			msg.WriteString(" " + ovhWords[rng.IntN(len(ovhWords))])
			if k%8 != 7 {
				continue
			}
			var err error
			if m, err = count(msg.String() + closing); err != nil {
				return nil, err
			}
			if headToks+m >= target {
				head.WriteString(msg.String() + closing)
				c.head = head.String()
				ids, err := ref.Encode(c.head, true)
				c.headIDs = ids
				return c, err
			}
		}
		head.WriteString(msg.String() + closing)
		headToks += m
		msg.Reset()
		msg.WriteString(roles[turn%2] + "\n")
	}
}

// variant i is the conversation with request i's last user turn; its ids are
// the head's followed by the turn's, which the L1 cache guarantees equal the
// tokenizer's ids of the whole.
func (c *ovhConversation) variant(i int) (ovhVariant, error) {
	rng := rand.New(rand.NewPCG(c.seed, uint64(i)+1<<32))
	var b strings.Builder
	fmt.Fprintf(&b, "user\nQuestion %d:", i)
	for {
		b.WriteString(" " + ovhWords[rng.IntN(len(ovhWords))])
		ids, err := c.ref.Encode(b.String(), false)
		if err != nil {
			return ovhVariant{}, err
		}
		if len(ids) >= c.tailToks {
			return ovhVariant{text: c.head + b.String(), ids: append(slices.Clip(c.headIDs), ids...)}, nil
		}
	}
}

func newOvhCase(input string, n int, direct, routed []time.Duration) OverheadCase {
	c := OverheadCase{
		Input:        input,
		PromptTokens: n,
		DirectP50us:  ovhPercentileUs(direct, 50),
		DirectP99us:  ovhPercentileUs(direct, 99),
		RouterP50us:  ovhPercentileUs(routed, 50),
		RouterP99us:  ovhPercentileUs(routed, 99),
	}
	c.AddedP50us = c.RouterP50us - c.DirectP50us
	c.AddedP99us = c.RouterP99us - c.DirectP99us
	return c
}

// ovhPercentileUs is the nearest-rank percentile of ds in microseconds.
func ovhPercentileUs(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.999999) - 1
	k = min(max(k, 0), len(s)-1)
	return float64(s[k]) / float64(time.Microsecond)
}

// throughput runs cfg.Concurrency clients sending 1K-token token-id requests
// (max_new_tokens 1) back to back for cfg.Duration, through the router or
// straight to the engine, and returns completed requests per second.
func throughput(ctx context.Context, r ovhPaths, cfg OverheadConfig, viaRouter bool) (float64, error) {
	rng := rand.New(rand.NewPCG(7, 7))
	pool := make([][]uint32, ovhThroughputPool)
	reqs := make([]*kvgatev1.GenerateRequest, ovhThroughputPool)
	for i := range pool {
		pool[i] = freshIDs(rng, ovhThroughputPrompt)
		reqs[i] = ovhRouterRequest(pool[i], "")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		done     atomic.Int64
		next     atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(cfg.Duration)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := int(next.Add(1)) % ovhThroughputPool
				var err error
				if viaRouter {
					_, _, err = r.sendRouter(ctx, reqs[i])
				} else {
					_, _, err = r.sendDirect(ctx, pool[i])
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, fmt.Errorf("overhead throughput: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(done.Load()) / elapsed.Seconds(), nil
}

func printOverhead(w io.Writer, cfg OverheadConfig, rep OverheadReport) {
	where := "in this process"
	if cfg.Executable != "" {
		where = "the engine (kvgate sim) and the router (kvgate serve) each a process of its own"
	}
	fmt.Fprintf(w, "Router overhead: one simulated SGLang engine at zero latency, %s; requests over loopback gRPC, timed to the completion (max_new_tokens 1, streamed).\n", where)
	if len(cfg.RouterArgs) > 0 {
		fmt.Fprintf(w, "Router flags added: %s.\n", strings.Join(cfg.RouterArgs, " "))
	}
	fmt.Fprintf(w, "%d sequential requests per case after %d warm-up, alternating straight-to-engine and through the router (cache_aware). GOMAXPROCS %d, %s/%s.\n\n",
		cfg.Requests, cfg.Warmup, runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "input\tprompt tokens\tdirect p50 µs\tdirect p99 µs\trouter p50 µs\trouter p99 µs\tadded p50 µs\tadded p99 µs\t")
	for _, c := range rep.Cases {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", c.Input, c.PromptTokens,
			c.DirectP50us, c.DirectP99us, c.RouterP50us, c.RouterP99us, c.AddedP50us, c.AddedP99us)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntokens: fresh random token ids for every request. text-l1-hit: a multi-turn ChatML conversation whose prefix up to its last special token is in the router's L1 cache; only the last user turn changes (L0 miss, L1 hit); the engine gets the same ids.\n")
	if cfg.Executable != "" {
		fmt.Fprintf(w, "relay-floor: the tokens cases through kvgate relay in the router's place, a process that forwards each call undecoded: what the extra hop alone adds on this machine.\n")
	}
	fmt.Fprintf(w, "\nThroughput, %d clients sending %d-token token-id requests back to back for %s (%d distinct prompts, cycled):\n",
		cfg.Concurrency, ovhThroughputPrompt, cfg.Duration, ovhThroughputPool)
	fmt.Fprintf(w, "  through the router:    %8.0f requests/s\n", rep.MaxRequestsPerSec)
	fmt.Fprintf(w, "  straight to the engine: %7.0f requests/s (context: engine, router and clients share this machine)\n", rep.EngineRequestsPerSec)
}

// freshIDs draws n token ids below the end-of-sequence id from rng: a
// prompt no earlier request shares, for the overhead measurements.
func freshIDs(rng *rand.Rand, n int) []uint32 {
	ids := make([]uint32, n)
	for j := range ids {
		ids[j] = uint32(rng.IntN(overheadEOS))
	}
	return ids
}
