package metricsdoc

import (
	"slices"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`rate(kvgate_router_cache_hits_total[5m]) / (rate(kvgate_router_cache_hits_total[5m]) + rate(kvgate_router_cache_misses_total[5m]))`,
			[]string{"kvgate_router_cache_hits_total", "kvgate_router_cache_misses_total"}},
		{`stddev(kvgate_worker_requests_active) / avg(kvgate_worker_requests_active)`, []string{"kvgate_worker_requests_active"}},
		{`histogram_quantile(0.99, sum by (le) (rate(kvgate_time_to_first_token_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`,
			[]string{"kvgate_time_to_first_token_seconds_bucket"}},
		{`sum without (worker) (x_total{a="b}", c=~"{"}) > on(model) group_left(worker) y offset 5m`, []string{"x_total", "y"}},
		{`sum by (policy, branch) (increase(kvgate_policy_decisions_total{policy=~"pd_decode:.*"}[1h])) > 1e3`,
			[]string{"kvgate_policy_decisions_total"}},
		{`max_over_time(kvgate_admission_queue_depth[10m:1m]) and ${datasource_ignored} or vector(0)`, []string{"kvgate_admission_queue_depth"}},
		{`label_replace(up, "a", "$1", "b", "(.*)") unless bool 0.5`, []string{"up"}},
		{`{__name__="hidden"}`, nil},
	}
	for _, tt := range tests {
		got, err := MetricNames(tt.expr)
		if err != nil {
			t.Errorf("%s: %v", tt.expr, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("MetricNames(%s) = %v, want %v", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{`rate(x[5m`, `x{a="b}`, `x{a="b`} {
		if _, err := MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%s): no error", bad)
		}
	}
}

const sample = "# Metrics\n\n" +
	"| metric | type | labels | unit | meaning |\n" +
	"|---|---|---|---|---|\n" +
	"| `kvgate_a_total` | counter | `worker`, `code` | requests | a \\| b |\n" +
	"| `kvgate_b_seconds` | histogram | — | seconds | b |\n" +
	"\n```promql smg\nrate(kvgate_a_total[5m])\n```\n"

func TestParse(t *testing.T) {
	d, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	a := d.Metrics["kvgate_a_total"]
	if a.Type != "counter" || !slices.Equal(a.Labels, []string{"code", "worker"}) || a.Unit != "requests" || a.Line != 5 {
		t.Errorf("kvgate_a_total = %+v", a)
	}
	if b := d.Metrics["kvgate_b_seconds"]; b.Type != "histogram" || b.Labels != nil {
		t.Errorf("kvgate_b_seconds = %+v", b)
	}
	if len(d.Blocks) != 1 || d.Blocks[0].Info != "promql smg" || d.Blocks[0].Text != "rate(kvgate_a_total[5m])" {
		t.Errorf("blocks %+v", d.Blocks)
	}
	for name, want := range map[string]string{"kvgate_b_seconds_bucket": "kvgate_b_seconds", "kvgate_b_seconds_count": "kvgate_b_seconds",
		"kvgate_a_total": "kvgate_a_total", "kvgate_a_total_count": "", "kvgate_c": ""} {
		got, ok := d.BaseName(name)
		if got != want || ok != (want != "") {
			t.Errorf("BaseName(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if p := TableProblems(sample); len(p) != 0 {
		t.Errorf("TableProblems: %v", p)
	}
}

func TestParseRefusesWhatTheTestsCouldMisread(t *testing.T) {
	head := "| metric | type | labels | unit | meaning |\n|---|---|---|---|---|\n"
	for _, row := range []string{
		"| `kvgate_a` | counter | `worker` | x |",                                  // a cell short
		"| `kvgate_a` | summary | — | x | y |",                                     // unknown type
		"| `kvgate_a`, `kvgate_b` | counter | — | x | y |",                         // two names
		"| `kvgate_a` | counter | worker | x | y |",                                // labels not backticked
		"| `kvgate_a` | counter | — | x | y |\n| `kvgate_a` | gauge | — | x | y |", // twice
	} {
		if _, err := Parse(head + row + "\n"); err == nil {
			t.Errorf("Parse accepted %q", row)
		}
	}
}

func TestTableProblems(t *testing.T) {
	tests := []struct {
		name, md string
		problems int
	}{
		{"fine", "| a | b |\n|---|:--:|\n| 1 | 2 |\n", 0},
		{"escaped pipe", "| a | b |\n|---|---|\n| `x \\| y` | 2 |\n", 0},
		{"unescaped pipe in a cell", "| a | b |\n|---|---|\n| |x| | 2 |\n", 1},
		{"a cell short", "| a | b |\n|---|---|\n| 1 |\n", 1},
		{"no delimiter row", "| a | b |\n| 1 | 2 |\n", 1},
		{"in a fence", "```\n| a | b |\n| 1 |\n```\n", 0},
	}
	for _, tt := range tests {
		if got := TableProblems(tt.md); len(got) != tt.problems {
			t.Errorf("%s: %d problems %v, want %d", tt.name, len(got), strings.Join(got, "; "), tt.problems)
		}
	}
}

func TestParseExposition(t *testing.T) {
	page := `# HELP kvgate_a_total A.
# TYPE kvgate_a_total counter
kvgate_a_total{code="OK",worker="grpc://h:1"} 3
kvgate_a_total{code="x\"y\\z",worker="w"} 0
# TYPE kvgate_b_seconds histogram
kvgate_b_seconds_bucket{le="0.1"} 0
kvgate_b_seconds_bucket{le="+Inf"} 0
kvgate_b_seconds_sum 0
kvgate_b_seconds_count 0
# TYPE kvgate_c gauge
kvgate_c 0
`
	fams, err := ParseExposition(page)
	if err != nil {
		t.Fatal(err)
	}
	a := fams["kvgate_a_total"]
	if a == nil || a.Type != "counter" || len(a.Series) != 2 || a.Series[1].Labels["code"] != `x"y\z` || !a.Moved() {
		t.Fatalf("kvgate_a_total = %+v", a)
	}
	if b := fams["kvgate_b_seconds"]; b == nil || len(b.Series) != 4 || b.Moved() {
		t.Fatalf("kvgate_b_seconds = %+v", b)
	}
	if c := fams["kvgate_c"]; c == nil || !c.Moved() {
		t.Fatalf("kvgate_c = %+v", c)
	}
	if _, err := ParseExposition("kvgate_orphan 1\n"); err == nil {
		t.Fatal("a sample without its family parsed")
	}
}
