// Command attack runs one attack of issue 21 against a kvgate router running
// as its own process on loopback, and reports what happened as one row of a
// Markdown table: what the attacker's calls got, the router's RSS, how long
// the fleet was down for a valid client, and the router's goroutines.
//
// While the attack runs, a prober sends one small valid Generate every
// -probe-interval (each with its own deadline) and a sampler reads the
// router's VmRSS from /proc every 100 ms and its go_goroutines from /metrics.
// After the attack the probes go on until ten in a row succeed (at least
// -min-tail) or -tail has passed, so a fleet that stays down is measured, not
// assumed. The report says what was observed; it assumes no outcome.
//
//	go run ./scripts/attack -attack logprobs -router 127.0.0.1:41900 \
//	    -metrics 127.0.0.1:41909 -pid $(pgrep ...) -label "1 logprobs"
//
// scripts/attack.sh starts the fleets and runs every attack. The program
// dials 127.0.0.1 only, and every loop is bounded in count and in time.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// config holds the flags of one run.
type config struct {
	attack, label   string
	router, metrics string
	pprof           string
	pid             int
	key, wrongKey   string
	secrets         string
	workers         string
	watch           string
	n, concurrency  int
	bytes, ids      int
	hold, duration  time.Duration
	callTimeout     time.Duration
	attackTimeout   time.Duration
	tail, minTail   time.Duration
	baseline        time.Duration
	probeInterval   time.Duration
	probeTimeout    time.Duration
	deadPortBase    int
	header          bool
	quiet           bool
	detailsFile     string
}

func main() {
	var c config
	flag.StringVar(&c.attack, "attack", "", "logprobs, embed, silent-streams, stalled-readers, big-text-explain, big-text-generate, auth-struct, auth-struct-chat, observe, admin, pprof, load")
	flag.StringVar(&c.label, "label", "", "the row's first cell (default: -attack)")
	flag.StringVar(&c.router, "router", "127.0.0.1:30000", "the router's gRPC address (127.0.0.1 only)")
	flag.StringVar(&c.metrics, "metrics", "127.0.0.1:29000", "the router's Prometheus address (127.0.0.1 only)")
	flag.StringVar(&c.pprof, "pprof", "", "pprof attack: the router's --pprof-addr (127.0.0.1 only)")
	flag.IntVar(&c.pid, "pid", 0, "the router's process id, for its VmRSS")
	flag.StringVar(&c.key, "key", "", "the valid API key the prober (and the attacks that need one) send")
	flag.StringVar(&c.wrongKey, "wrong-key", "wrong-key", "auth-struct: the key the attacker sends")
	flag.StringVar(&c.secrets, "secrets", "", "pprof: comma-separated strings that must not appear in /debug/pprof/cmdline")
	flag.StringVar(&c.workers, "workers", "", "admin: comma-separated worker addresses to remove when ListWorkers is refused")
	flag.StringVar(&c.watch, "watch", "", "comma-separated metrics whose change (summed over labels) the row reports")
	flag.IntVar(&c.n, "n", 10, "calls (or streams, or workers added) the attack makes")
	flag.IntVar(&c.concurrency, "concurrency", 0, "calls at once (0: all -n at once); observe: streams of background load")
	flag.IntVar(&c.bytes, "bytes", 8<<20-4096, "big-text-*: text bytes; auth-struct: encoded Struct bytes")
	flag.IntVar(&c.ids, "ids", 40000, "logprobs: prompt token ids per request")
	flag.DurationVar(&c.hold, "hold", 35*time.Second, "silent-streams, stalled-readers: how long the streams are held")
	flag.DurationVar(&c.duration, "duration", 16*time.Second, "observe: how long to watch (with -concurrency streams of load)")
	flag.DurationVar(&c.callTimeout, "call-timeout", 60*time.Second, "deadline of each attacking call")
	flag.DurationVar(&c.attackTimeout, "attack-timeout", 5*time.Minute, "the whole attack's deadline")
	flag.DurationVar(&c.tail, "tail", 70*time.Second, "longest watch after the attack for the fleet to come back")
	flag.DurationVar(&c.minTail, "min-tail", 3*time.Second, "shortest watch after the attack")
	flag.DurationVar(&c.baseline, "baseline", time.Second, "probing and sampling before the attack starts")
	flag.DurationVar(&c.probeInterval, "probe-interval", 100*time.Millisecond, "time between probes")
	flag.DurationVar(&c.probeTimeout, "probe-timeout", 5*time.Second, "deadline of each probe (a slower answer is a failure)")
	flag.IntVar(&c.deadPortBase, "dead-port-base", 20000, "admin: AddWorker names -n ports of 127.0.0.1 from BASE up where nothing listens (keep it below the ephemeral range, where other programs' engines may listen)")
	flag.BoolVar(&c.quiet, "quiet", false, "probe only after the attack (the attacker alone on the fleet, then valid clients come)")
	flag.BoolVar(&c.header, "header", false, "print the table's header and exit")
	flag.StringVar(&c.detailsFile, "details", "", "append the attack's failure messages to this file")
	flag.Parse()
	if c.header {
		fmt.Println("| attack | attacker's calls | call ms p50/max | router RSS MB base/peak/after | fleet down s | probes ok/sent (failures) | goroutines base/peak/after | metrics change | notes |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|")
		return
	}
	if c.label == "" {
		c.label = c.attack
	}
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		fmt.Printf("| %s | error: %v | | | | | | | |\n", c.label, err)
		os.Exit(1)
	}
}

// check refuses any address that is not 127.0.0.1: the attacks are meant
// for a fleet on this machine only.
func (c *config) check() error {
	for _, a := range []string{c.router, c.metrics, c.pprof} {
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			return fmt.Errorf("%q: only 127.0.0.1:PORT may be dialled", a)
		}
	}
	if _, ok := attackNamed(c.attack); !ok {
		return fmt.Errorf("-attack %q: unknown (see -help)", c.attack)
	}
	if c.pid <= 0 {
		return fmt.Errorf("-pid is required (the router's process, for its RSS)")
	}
	if c.n <= 0 || c.n > 100000 {
		return fmt.Errorf("-n %d: want 1..100000", c.n)
	}
	return nil
}

// dial opens a plaintext connection to a loopback address (checked by
// config.check) that may send and receive large messages.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
}

func run(c config) error {
	attack, _ := attackNamed(c.attack) // checked by config.check
	conn, err := dial(c.router)
	if err != nil {
		return err
	}
	defer conn.Close()
	router := kvgatev1.NewRouterClient(conn)

	pr := &prober{router: router, key: c.key, interval: c.probeInterval, timeout: c.probeTimeout}
	if err := waitReady(router, c.key, 30*time.Second); err != nil {
		return fmt.Errorf("the fleet never served a valid request before the attack: %w", err)
	}
	obsCtx, stopObs := context.WithCancel(context.Background())
	var obs sync.WaitGroup
	smp := &sampler{pid: c.pid, metrics: c.metrics, interval: 100 * time.Millisecond}
	horizon := c.baseline + c.attackTimeout + c.tail + time.Minute
	probe := func() { defer obs.Done(); pr.run(obsCtx, int(horizon/c.probeInterval)) }
	obs.Add(1)
	go func() { defer obs.Done(); smp.run(obsCtx, int(horizon/smp.interval)) }()
	if !c.quiet {
		obs.Add(1)
		go probe()
	}
	time.Sleep(c.baseline) // the baseline is time passing with no attack: there is no signal to wait on
	watch := splitList(c.watch)
	before := scrape(c.metrics, watch...)
	base := smp.last()
	base.goroutines = goroutines(c.metrics)
	attackStart := time.Now()

	t := newTally()
	actx, cancel := context.WithTimeout(context.Background(), c.attackTimeout)
	err = attack(actx, c, conn, t)
	cancel()
	if err != nil {
		t.notef("attack error: %v", err)
	}
	attackEnd := time.Now()
	if c.quiet {
		obs.Add(1)
		go probe()
	}

	// The tail: until ten probes in a row started after the attack succeeded,
	// at least minTail, at most tail.
	tick := time.NewTicker(100 * time.Millisecond)
	for {
		since := time.Since(attackEnd)
		if since >= c.tail || (since >= c.minTail && pr.healthyFor(attackEnd, 10)) {
			break
		}
		<-tick.C
	}
	tick.Stop()
	after := smp.last()
	after.goroutines = goroutines(c.metrics)
	afterMetrics := scrape(c.metrics, watch...)
	stopObs()
	obs.Wait()
	end := time.Now()

	peakRSS, peakG := smp.peak(attackStart)
	ps := pr.sorted()
	downFrom := attackStart
	if c.quiet {
		downFrom = attackEnd // no probe ran during the attack
	}
	down, open := downTime(ps, downFrom, end)
	downCell := fmt.Sprintf("%.1f", down.Seconds())
	if open {
		downCell = fmt.Sprintf("≥%.1f (still down at the end)", down.Seconds())
	}
	probeCodes := map[string]int{}
	ok := 0
	for _, p := range ps {
		if p.start.Before(attackStart) {
			continue
		}
		if p.code == codes.OK {
			ok++
		} else {
			probeCodes[p.code.String()]++
		}
	}
	sent := 0
	for _, p := range ps {
		if !p.start.Before(attackStart) {
			sent++
		}
	}
	fmt.Printf("| %s | %s | %s | %s/%s/%s | %s | %d/%d (%s) | %s/%s/%s | %s | %s |\n",
		c.label, t.codes(), t.latency(),
		mb(base.rssKB), mb(peakRSS), mb(after.rssKB),
		downCell, ok, sent, countsCell(probeCodes),
		gcell(base.goroutines), gcell(peakG), gcell(after.goroutines),
		metricsDelta(watch, before, afterMetrics), t.notesCell())
	if c.detailsFile != "" {
		t.writeDetails(c.detailsFile, c.label)
	}
	return nil
}

// waitReady sends valid requests, one after another, until one succeeds.
func waitReady(router kvgatev1.RouterClient, key string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var err error
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		maxNew := uint32(1)
		err = drain(router.Generate(withKey(ctx, key), &kvgatev1.GenerateRequest{
			InputIds: []uint32{72, 105}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &maxNew},
		}))
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // retry pacing while the router fetches its tokenizer
	}
	return err
}

// tally counts what the attacker's calls got.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
	msgs   map[string]int
	lat    []time.Duration
	notes  []string
}

func newTally() *tally { return &tally{counts: map[string]int{}, msgs: map[string]int{}} }

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// add records a call's outcome: its gRPC code, and for failures its message
// with numbers replaced by N, so that messages differing only in ids group.
func (t *tally) add(err error, d time.Duration) {
	st := status.Convert(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[st.Code().String()]++
	if d > 0 {
		t.lat = append(t.lat, d)
	}
	if err != nil {
		msg := digits.ReplaceAllString(st.Message(), "N")
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		t.msgs[st.Code().String()+": "+msg]++
	}
}

// label counts an outcome that is not a gRPC code (an HTTP status, a stream
// still open).
func (t *tally) label(l string) {
	t.mu.Lock()
	t.counts[l]++
	t.mu.Unlock()
}

func (t *tally) notef(format string, args ...any) {
	t.mu.Lock()
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

func (t *tally) codes() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return countsCell(t.counts)
}

func (t *tally) latency() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lat) == 0 {
		return "-"
	}
	l := append([]time.Duration(nil), t.lat...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return fmt.Sprintf("%d/%d", l[len(l)/2].Milliseconds(), l[len(l)-1].Milliseconds())
}

func (t *tally) notesCell() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.notes) == 0 {
		return "-"
	}
	return strings.Join(t.notes, "; ")
}

// writeDetails appends the failure messages, most frequent first.
func (t *tally) writeDetails(path, label string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range t.msgs {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	fmt.Fprintf(f, "%s:\n", label)
	if len(l) == 0 {
		fmt.Fprintln(f, "  (no failed calls)")
	}
	for i, e := range l {
		if i == 8 {
			fmt.Fprintf(f, "  … %d more distinct messages\n", len(l)-i)
			break
		}
		fmt.Fprintf(f, "  %5d × %s\n", e.v, e.k)
	}
}

// countsCell prints counts as "A=3 B=1", largest first, "-" when empty.
func countsCell(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func metricsDelta(names []string, before, after map[string]float64) string {
	if len(names) == 0 {
		return "-"
	}
	var parts []string
	for _, n := range names {
		if after == nil || before == nil {
			parts = append(parts, strings.TrimPrefix(n, "kvgate_")+"=?")
			continue
		}
		a, b := after[n], before[n] // a vector with no sample yet is 0
		parts = append(parts, fmt.Sprintf("%s+%s", strings.TrimPrefix(n, "kvgate_"), strconv.FormatFloat(a-b, 'f', -1, 64)))
	}
	return strings.Join(parts, " ")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func mb(kb int64) string { return fmt.Sprintf("%d", kb/1024) }

func gcell(g int64) string {
	if g < 0 {
		return "?"
	}
	return fmt.Sprintf("%d", g)
}
