package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// Report is the result of one `kvgate bench` invocation; its JSON field names
// are read by other tools: keep them stable.
type Report struct {
	Workload string      `json:"workload"`
	Runs     []PolicyRun `json:"runs"`
	// Throughput is, with --peers, each router's most requests/s.
	Throughput []PeerThroughput `json:"peer_throughput,omitempty"`
}

// PolicyRun is one policy's result with one number of routers.
type PolicyRun struct {
	Policy string `json:"policy"`
	// Routers is the number of router replicas in front of the engines, each
	// request sent to one of them at random (1 with --target: one address).
	Routers int     `json:"routers"`
	TTFT    Summary `json:"ttft_ms"`
	// TTFTSent is TTFT over every request sent, a failed one counted as
	// slower than any that succeeded (see SentSummary).
	TTFTSent           SentSummary `json:"ttft_sent_ms"`
	ITL                Summary     `json:"itl_ms"`
	E2E                Summary     `json:"e2e_ms"`
	RequestsPerSec     float64     `json:"requests_per_s"`
	OutputTokensPerSec float64     `json:"output_tokens_per_s"`
	CacheHitRate       float64     `json:"cache_hit_rate"`
	OracleHitRate      float64     `json:"oracle_hit_rate"`
	// PredictionExact is null for policies that predict nothing.
	PredictionExact *float64 `json:"prediction_exact"`
	LoadCoV         float64  `json:"load_cov"`
	// SameWorkerRate is, for workloads of conversations, the share of turns
	// after a conversation's first that went to the worker its previous turn
	// went to: whether routers that see only some of a conversation's turns
	// still agree where it lives. Null for workloads without conversations.
	SameWorkerRate *float64 `json:"same_worker_rate"`
	Requests       int      `json:"requests"`
	Errors         int      `json:"errors"`
	// Misses says why predictions missed; null for policies that predict
	// nothing or do not say.
	Misses *Misses `json:"prediction_misses,omitempty"`

	// Router is what a run with --peers measured of the router's process;
	// null for routers in the bench's own process.
	Router *RouterCost `json:"router,omitempty"`

	// TTFTs are the successful requests' TTFTs in ms, sorted, for the chart.
	TTFTs []float64 `json:"-"`
	// outcomes are the requests' own figures, for the progress line and
	// the request log; start is when the run began.
	outcomes []outcome
	start    time.Time
}

func nullable(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize folds a run's outcomes into its figures. workers is the fleet
// size (0: only the workers seen count towards the load CoV).
// The hit rates count the successful requests only.
func summarize(label string, start time.Time, os []outcome, workers int) PolicyRun {
	r := PolicyRun{Policy: label, Requests: len(os), start: start}
	var ttft, itl, e2e []float64
	var prompt, cached, oracle, completion int
	perWorker := map[string]int{}
	end := start
	for _, o := range os {
		if o.end.After(end) {
			end = o.end
		}
		if o.err != nil {
			r.Errors++
			continue
		}
		ttft = append(ttft, ms(o.ttft))
		e2e = append(e2e, ms(o.e2e))
		for _, g := range o.itl {
			itl = append(itl, ms(g))
		}
		prompt += o.prompt
		cached += o.cached
		oracle += o.oracle
		completion += o.completion
		perWorker[o.worker]++
	}
	r.TTFT, r.ITL, r.E2E = Summarize(ttft), Summarize(itl), Summarize(e2e)
	r.TTFTs = sortedCopy(ttft)
	r.TTFTSent = summarizeSent(r.TTFTs, r.Requests)
	if secs := end.Sub(start).Seconds(); secs > 0 {
		r.RequestsPerSec = float64(len(ttft)) / secs
		r.OutputTokensPerSec = float64(completion) / secs
	}
	if prompt > 0 {
		r.CacheHitRate = float64(cached) / float64(prompt)
		r.OracleHitRate = float64(oracle) / float64(prompt)
	}
	counts := make([]int, 0, max(workers, len(perWorker)))
	for _, c := range perWorker {
		counts = append(counts, c)
	}
	for len(counts) < workers {
		counts = append(counts, 0)
	}
	r.LoadCoV = CoV(counts)
	return r
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// replicated tells whether some run had several routers. Only then does the
// table show the routers and same-worker columns, so a report of single
// routers reads exactly as it did before replicas existed.
func (rep *Report) replicated() bool {
	for _, r := range rep.Runs {
		if r.Routers > 1 {
			return true
		}
	}
	return false
}

// label names run i in the chart: its policy, with its replica count when
// the report compares replica counts.
func (rep *Report) label(i int) string {
	r := rep.Runs[i]
	return runLabel(r.Policy, r.Routers, rep.replicated())
}

// WriteTable prints the report as an aligned table.
func (rep *Report) WriteTable(w io.Writer) error {
	replicated := rep.replicated()
	fmt.Fprintf(w, "workload: %s\n", rep.Workload)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	peers := rep.peers()
	routersCol, sameCol, costCol := "", "", ""
	if replicated {
		routersCol, sameCol = "routers\t", "same worker\t"
	}
	if peers {
		costCol = "engine hit\tcpu s/1k\trss MiB\t"
	}
	fmt.Fprintln(tw, "policy\t"+routersCol+"ttft p50\tp90\tp99\tmean\titl p50\tp99\te2e p50\tp99\treq/s\tout tok/s\thit\toracle\tpred exact\tload cov\t"+sameCol+costCol+"reqs\terrors\t")
	for _, r := range rep.Runs {
		if replicated {
			routersCol = fmt.Sprintf("%d\t", r.Routers)
			sameCol = orDash(r.SameWorkerRate) + "\t"
		}
		if peers {
			costCol = "-\t-\t-\t"
			if c := r.Router; c != nil {
				costCol = fmt.Sprintf("%.3f\t%.2f\t%.0f\t", c.EngineCacheHitRate, c.CPUSecondsPer1K, c.PeakRSSMiB)
			}
		}
		fmt.Fprintf(tw, "%s\t%s%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.0f\t%.0f\t%.1f\t%.0f\t%.3f\t%.3f\t%s\t%.3f\t%s%s%d\t%d\t\n",
			r.Policy, routersCol, r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.TTFT.Mean, r.ITL.P50, r.ITL.P99, r.E2E.P50, r.E2E.P99,
			r.RequestsPerSec, r.OutputTokensPerSec, r.CacheHitRate, r.OracleHitRate, orDash(r.PredictionExact), r.LoadCoV, sameCol, costCol, r.Requests, r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeMisses(w, rep.Runs)
	writeLegend(w, replicated, peers)
	if len(rep.Throughput) == 0 {
		return nil
	}
	fmt.Fprintln(w, "most requests/s, 1K-token prompts, one output token, engines without latency:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "router\treq/s\tcpu µs/req\tcores\treqs\terrors\t")
	for _, t := range rep.Throughput {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%d\t%d\t\n", t.Router, t.RequestsPerSec, t.CPUusPerReq, t.Cores, t.Requests, t.Errors)
	}
	return tw.Flush()
}

// peers tells whether some run measured a router process (--peers).
func (rep *Report) peers() bool {
	for _, r := range rep.Runs {
		if r.Router != nil {
			return true
		}
	}
	return false
}

// orDash formats a rate to three places, or "-" when there is none.
func orDash(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *x)
}

// legend explains the table's columns, one line each, in the table's order.
// The optional columns' lines appear only with their columns.
var legend = []struct {
	column, meaning string
	when            func(replicated, peers bool) bool
}{
	{"policy", "the routing policy (kvgate:P and smg:P: that router in a process of its own)", nil},
	{"routers", "router replicas in front of the same engines, each request sent to one at random", func(r, _ bool) bool { return r }},
	{"ttft", "time to first token, ms: p50, p90, p99 and the mean", nil},
	{"itl", "inter-token latency, the gap between streamed tokens, ms: p50 and p99", nil},
	{"e2e", "request sent to its last token, ms: p50 and p99", nil},
	{"req/s", "successful requests per second, from the first request to the last answer; out tok/s the same for output tokens", nil},
	{"hit", "cached prompt tokens / prompt tokens, as the answers reported them (successful requests)", nil},
	{"oracle", "the hit rate one cache of unlimited size, shared by every engine, would reach on the same requests", nil},
	{"pred exact", "share of requests whose cached tokens the router predicted exactly before sending (- : the policy predicts none)", nil},
	{"load cov", "coefficient of variation (standard deviation / mean) of requests per worker: 0 is perfectly even", nil},
	{"same worker", "turns after a conversation's first that went where its previous turn went", func(r, _ bool) bool { return r }},
	{"engine hit", "the engines' own cached / prompt tokens, counted by the engines", func(_, p bool) bool { return p }},
	{"cpu s/1k", "the router process's CPU seconds (user + system) per 1,000 requests", func(_, p bool) bool { return p }},
	{"rss MiB", "the router process's peak resident memory", func(_, p bool) bool { return p }},
	{"reqs, errors", "requests sent, and those that failed", nil},
}

// writeLegend prints the legend for a table with the given optional columns.
func writeLegend(w io.Writer, replicated, peers bool) {
	fmt.Fprintln(w, "columns:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range legend {
		if l.when == nil || l.when(replicated, peers) {
			fmt.Fprintf(tw, "  %s\t%s\n", l.column, l.meaning)
		}
	}
	tw.Flush()
}
