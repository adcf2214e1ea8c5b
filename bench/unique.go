package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// Unique is the workload in which no two requests share anything: text,
// routing key or request id. It exists to prove that every per-request
// structure of the router (tokenizer caches, routing tree, routing-key and
// rate-limit maps) stays bounded, which a repetitive workload never tests,
// and to measure admission control, since each request is a fresh stream.
const Unique = "unique"

// UniqueConfig is one run of the unique workload against a running router.
type UniqueConfig struct {
	// Target is the router's gRPC address (host:port).
	Target string
	// Duration bounds the run in time (0: until Requests are sent).
	Duration time.Duration
	// Requests bounds the run in requests (0: until Duration ends). One of
	// Duration and Requests is required.
	Requests int
	// Concurrency is the number of streams open at once: each of that many
	// senders sends its next request when the previous one ends. Requests =
	// Concurrency makes a burst of that many simultaneous streams.
	Concurrency int
	// QPS paces the starts of requests (0: as fast as Concurrency allows).
	QPS float64
	// PromptBytes is the length of each text prompt (Chat: of each message
	// pair together).
	PromptBytes int
	// OutputTokens is max_new_tokens of every request.
	OutputTokens int
	// ChatEvery makes every ChatEvery-th request a Chat instead of a text
	// Generate (0: Generate only). Chat prompts go through the chat template,
	// so the special-token-boundary (L1) cache sees them; Generate text only
	// reaches the exact-match (L0) cache.
	ChatEvery int
	// Seed picks the prompts' words; a per-run nonce keeps two runs with the
	// same seed from sharing a prompt, so a long-running router never gets a
	// cache hit from an earlier run.
	Seed uint64
	// MetricsAddr, when set, is the router's Prometheus host:port; its
	// go_goroutines is sampled during the run and its peak reported.
	MetricsAddr string
	// Progress, when not nil, receives a line every ProgressEvery (default
	// 10 s): elapsed seconds, requests done, errors. Long soaks read it.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// UniqueReport is what a unique run measured. Admitted requests are those not
// refused with RESOURCE_EXHAUSTED; latencies are of those that completed.
type UniqueReport struct {
	Elapsed float64        `json:"elapsed_s"`
	Sent    int            `json:"sent"`
	OK      int            `json:"ok"`
	Refused int            `json:"refused"`
	Codes   map[string]int `json:"codes"`
	TTFT    Summary        `json:"ttft_ms"`
	E2E     Summary        `json:"e2e_ms"`
	// RefusedIn is how long refusals took: a router that sheds load should
	// answer RESOURCE_EXHAUSTED at once, not after a wait.
	RefusedIn Summary `json:"refused_ms"`
	Requests  float64 `json:"requests_per_s"`
	// PeakGoroutines is the largest go_goroutines read from MetricsAddr
	// (0: not sampled); Goroutines is the first sample, before the load.
	Goroutines     int `json:"goroutines_idle"`
	PeakGoroutines int `json:"goroutines_peak"`
	// FirstError is the first failure other than the run's end, for telling
	// a refusal from a broken setup.
	FirstError string `json:"first_error,omitempty"`
}

// uniqueWords are the vocabulary of the prompts: ordinary words, so the
// tokenizer works as it does on prose rather than on one long run of bytes.
var uniqueWords = strings.Fields(`the of and to in is was for on that with as by at from it an be this
which or are not have has had were but their its more one all can also other they after been into two
some time such first when over most new would only where between through these those many under while
kernel cache token router prefix engine worker request stream latency batch queue memory page tree
model prompt decode prefill shard replica cluster region policy metric bound limit window signal`)

// uniqueText returns n bytes of prose unique to (nonce, i): the nonce and
// index come first, so no two prompts share even their first token, then
// words drawn from a generator keyed by seed and i.
func uniqueText(nonce, seed uint64, i, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	fmt.Fprintf(&b, "%x-%d:", nonce, i)
	r := rng(seed, 0x0417, uint64(i))
	for b.Len() < n {
		b.WriteByte(' ')
		b.WriteString(uniqueWords[r.IntN(len(uniqueWords))])
	}
	return b.String()[:max(n, 0)]
}

// RunUnique sends the unique workload to cfg.Target and reports.
func RunUnique(ctx context.Context, cfg UniqueConfig) (*UniqueReport, error) {
	if cfg.Target == "" {
		return nil, errors.New("the unique workload needs --target (a router that serves text)")
	}
	if cfg.Duration <= 0 && cfg.Requests <= 0 {
		return nil, errors.New("the unique workload needs --duration or --requests")
	}
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("concurrency %d; the unique workload needs at least 1", cfg.Concurrency)
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	u := &uniqueRun{cfg: cfg, client: kvgatev1.NewRouterClient(conn), nonce: uint64(time.Now().UnixNano()),
		codes: map[codes.Code]int{}}

	runCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	rep := &UniqueReport{Codes: map[string]int{}}
	var sampler sync.WaitGroup
	stopSampling := make(chan struct{})
	if cfg.MetricsAddr != "" {
		rep.Goroutines = scrapeGoroutines(ctx, cfg.MetricsAddr)
		rep.PeakGoroutines = rep.Goroutines
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-t.C:
					rep.PeakGoroutines = max(rep.PeakGoroutines, scrapeGoroutines(ctx, cfg.MetricsAddr))
				}
			}
		}()
	}

	start := time.Now()
	if cfg.Progress != nil {
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			t := time.NewTicker(cfg.ProgressEvery)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-t.C:
					fmt.Fprintf(cfg.Progress, "unique: %.0f s, %d requests done, %d errors\n",
						time.Since(start).Seconds(), u.done.Load(), u.failed.Load())
				}
			}
		}()
	}
	u.run(runCtx, start)
	elapsed := time.Since(start)
	close(stopSampling)
	sampler.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep.Elapsed = elapsed.Seconds()
	rep.Sent = int(u.done.Load())
	for c, n := range u.codes {
		rep.Codes[c.String()] = n
		switch c {
		case codes.OK:
			rep.OK = n
		case codes.ResourceExhausted:
			rep.Refused = n
		}
	}
	rep.TTFT, rep.E2E, rep.RefusedIn = Summarize(u.ttft), Summarize(u.e2e), Summarize(u.refusedIn)
	if u.firstErr != nil {
		rep.FirstError = u.firstErr.Error()
	}
	rep.Requests = float64(rep.Sent) / elapsed.Seconds()
	return rep, nil
}

// uniqueRun is the state of one RunUnique.
type uniqueRun struct {
	cfg          UniqueConfig
	client       kvgatev1.RouterClient
	nonce        uint64
	done, failed atomic.Int64

	mu        sync.Mutex
	codes     map[codes.Code]int
	ttft, e2e []float64
	refusedIn []float64
	firstErr  error
}

// run hands request indices to Concurrency senders until the run's context
// ends or Requests are handed out. Requests cut off by the end of the
// duration are not counted: they measure the deadline, not the router.
func (u *uniqueRun) run(ctx context.Context, start time.Time) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range u.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				u.send(ctx, i)
			}
		}()
	}
	for i := 0; u.cfg.Requests <= 0 || i < u.cfg.Requests; i++ {
		if u.cfg.QPS > 0 && !sleepUntil(ctx, start.Add(time.Duration(float64(i)/u.cfg.QPS*float64(time.Second)))) {
			break
		}
		select {
		case next <- i:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(next)
	wg.Wait()
}

// send runs request i, streamed, and records its code and latencies.
func (u *uniqueRun) send(runCtx context.Context, i int) {
	id := fmt.Sprintf("uniq-%x-%d", u.nonce, i)
	// The stream is left once its completion arrives, before io.EOF; gRPC
	// keeps an unfinished client stream's state until its context ends, so
	// each request gets a context of its own, cancelled on return. Without
	// it a long soak grows the client, not the router.
	ctx, cancel := context.WithCancel(runCtx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-routing-key", "key-"+id)
	maxNew := uint32(max(u.cfg.OutputTokens, 1))
	params := &kvgatev1.SamplingParams{MaxNewTokens: &maxNew, IgnoreEos: true}
	text := uniqueText(u.nonce, u.cfg.Seed, i, u.cfg.PromptBytes)

	type chunked interface {
		GetChunk() *kvgatev1.GenerateChunk
		GetComplete() *kvgatev1.GenerateComplete
	}
	var recv func() (chunked, error)
	var err error
	t0 := time.Now()
	if u.cfg.ChatEvery > 0 && i%u.cfg.ChatEvery == u.cfg.ChatEvery-1 {
		half := len(text) / 2
		var s grpc.ServerStreamingClient[kvgatev1.ChatResponse]
		s, err = u.client.Chat(ctx, &kvgatev1.ChatRequest{
			RequestId: id,
			Messages: []*kvgatev1.ChatMessage{
				{Role: "system", Content: text[:half]},
				{Role: "user", Content: text[half:]},
			},
			SamplingParams: params,
			Stream:         true,
		})
		recv = func() (chunked, error) { return s.Recv() }
	} else {
		var s grpc.ServerStreamingClient[kvgatev1.GenerateResponse]
		s, err = u.client.Generate(ctx, &kvgatev1.GenerateRequest{
			RequestId: id, Text: text, SamplingParams: params, Stream: true,
		})
		recv = func() (chunked, error) { return s.Recv() }
	}
	var ttft time.Duration
	for err == nil {
		var resp chunked
		if resp, err = recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a completion")
			}
			break
		}
		if c := resp.GetChunk(); c != nil && len(c.GetTokenIds()) > 0 && ttft == 0 {
			ttft = time.Since(t0)
		}
		if resp.GetComplete() != nil {
			break
		}
	}
	e2e := time.Since(t0)
	if runCtx.Err() != nil { // cut off by the end of the run
		return
	}
	if ttft == 0 {
		ttft = e2e
	}
	code := status.Code(err)
	u.done.Add(1)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.codes[code]++
	if err != nil {
		u.failed.Add(1)
		if u.firstErr == nil {
			u.firstErr = err
		}
		if code == codes.ResourceExhausted {
			u.refusedIn = append(u.refusedIn, float64(e2e)/float64(time.Millisecond))
		}
		return
	}
	u.ttft = append(u.ttft, float64(ttft)/float64(time.Millisecond))
	u.e2e = append(u.e2e, float64(e2e)/float64(time.Millisecond))
}

// scrapeGoroutines reads go_goroutines from the Prometheus endpoint at addr;
// 0 when it cannot.
func scrapeGoroutines(ctx context.Context, addr string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return 0
}

// WriteText writes the report as a few lines, codes sorted by name.
func (r *UniqueReport) WriteText(w io.Writer) error {
	names := make([]string, 0, len(r.Codes))
	for c := range r.Codes {
		names = append(names, c)
	}
	slices.Sort(names)
	var codesText []string
	for _, c := range names {
		codesText = append(codesText, fmt.Sprintf("%s=%d", c, r.Codes[c]))
	}
	_, err := fmt.Fprintf(w, "unique: %d requests in %.1f s (%.1f/s); admitted %d, refused (RESOURCE_EXHAUSTED) %d; codes %s\n"+
		"unique: admitted TTFT ms p50 %.1f p90 %.1f p99 %.1f; E2E ms p50 %.1f p99 %.1f; refused in ms p50 %.1f p99 %.1f\n"+
		"unique: router goroutines idle %d, peak %d\n",
		r.Sent, r.Elapsed, r.Requests, r.Sent-r.Refused, r.Refused, strings.Join(codesText, " "),
		r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.E2E.P50, r.E2E.P99, r.RefusedIn.P50, r.RefusedIn.P99, r.Goroutines, r.PeakGoroutines)
	if err == nil && r.FirstError != "" {
		_, err = fmt.Fprintf(w, "unique: first error: %s\n", r.FirstError)
	}
	return err
}
