package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// sampleSweep is sampleReport at three speeds, round_robin slowing down
// faster than cache_aware.
func sampleSweep() *Sweep {
	s := &Sweep{Workload: Trace, SLOTTFT: DefaultSLOTTFT}
	for k, speed := range []float64{3, 4, 5} {
		rep := sampleReport()
		for i := range rep.Runs {
			r := &rep.Runs[i]
			r.RequestsPerSec = 10 * speed
			r.TTFT.P50 *= float64(1 + k*(i+1))
			r.TTFT.P99 *= float64(1 + k*(i+1))
		}
		s.Points = append(s.Points, SweepPoint{Speed: speed, Report: rep})
	}
	return s
}

// TestGoodputCountsRequestsThatMetTheSLO: goodput is the share of the
// requests sent whose TTFT met the SLO (errors never meet it), and that
// share of the run's successful request rate.
func TestGoodputCountsRequestsThatMetTheSLO(t *testing.T) {
	for _, tc := range []struct {
		name        string
		run         PolicyRun
		slo         time.Duration
		perSec, met float64
	}{
		{"every request within the SLO", PolicyRun{RequestsPerSec: 8, Requests: 4, TTFTs: []float64{1, 5, 12, 40}}, 2 * time.Second, 8, 1},
		{"one of three successes over it, one error", PolicyRun{RequestsPerSec: 3, Requests: 4, Errors: 1, TTFTs: []float64{100, 110, 2000.5}}, 2 * time.Second, 2, 0.5},
		{"a TTFT equal to the SLO meets it", PolicyRun{RequestsPerSec: 1, Requests: 1, TTFTs: []float64{500}}, 500 * time.Millisecond, 1, 1},
		{"no successful request", PolicyRun{Requests: 2, Errors: 2}, time.Second, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			per, met := tc.run.Goodput(tc.slo)
			if per != tc.perSec || met != tc.met {
				t.Fatalf("Goodput(%v) = %g/s, %g met; want %g/s, %g", tc.slo, per, met, tc.perSec, tc.met)
			}
		})
	}
}

// TestSweepPlotDrawsEachPolicyAgainstSpeed: the sweep's chart is an SVG
// with three panels (TTFT p50, TTFT p99, goodput with its SLO stated),
// each with one line per policy through every speed, and labelled axes.
func TestSweepPlotDrawsEachPolicyAgainstSpeed(t *testing.T) {
	s := sampleSweep()
	var buf bytes.Buffer
	if err := s.WritePlot(&buf, `4 engines <"sim"> & co`); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	lines := map[string]int{} // polylines per series
	points := map[string]int{}
	texts := map[string]int{} // text elements by class
	var all []string
	dec := xml.NewDecoder(strings.NewReader(svg))
	root, class := "", ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			class = ""
			for _, a := range tok.Attr {
				switch {
				case tok.Name.Local == "polyline" && a.Name.Local == "data-series":
					lines[a.Value]++
				case tok.Name.Local == "polyline" && a.Name.Local == "points":
					points[a.Value] = len(strings.Fields(a.Value))
				case a.Name.Local == "class":
					class = tok.Name.Local + "." + a.Value
				}
			}
		case xml.CharData:
			if class != "" {
				texts[class+": "+string(tok)]++
			}
			all = append(all, string(tok))
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	for _, policy := range []string{"cache_aware", "round_robin"} {
		if lines[policy] != 3 {
			t.Errorf("%s: %d lines, want one in each of the 3 panels (%v)", policy, lines[policy], lines)
		}
	}
	if len(lines) != 2 {
		t.Errorf("series %v, want one per policy", lines)
	}
	for pts, n := range points {
		if n != 3 {
			t.Errorf("line %q has %d points, want one per speed", pts, n)
		}
	}
	for _, want := range []string{
		"text.x-label: replay speed (×)",
		"text.y-label: TTFT p50 (ms)",
		"text.y-label: TTFT p99 (ms)",
		"text.y-label: requests/s meeting the SLO",
	} {
		if texts[want] == 0 {
			t.Errorf("no axis label %q in %v", want, texts)
		}
	}
	if texts["text.x-label: replay speed (×)"] != 3 {
		t.Errorf("speed axis labelled %d times, want once per panel", texts["text.x-label: replay speed (×)"])
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"Goodput (TTFT ≤ 2s)", `4 engines <"sim"> & co`} {
		if !strings.Contains(joined, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

// TestSweepTableStatesTheSLO: a line per speed and policy, and the SLO
// the goodput column was counted against.
func TestSweepTableStatesTheSLO(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleSweep().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "cache_aware"); n != 3 {
		t.Errorf("%d cache_aware lines, want one per speed:\n%s", n, out)
	}
	if !strings.Contains(out, "SLO of 2s") {
		t.Errorf("table does not state the SLO:\n%s", out)
	}
	if !strings.Contains(out, "sent p50") || !strings.Contains(out, "a failed one slower than any success") {
		t.Errorf("table lacks TTFT over every request sent, or its legend:\n%s", out)
	}
}

// TestTTFTSentCountsFailuresAsSlowest: over every request sent, a failed
// request ranks after every success, so a run that fails more requests
// cannot show a lower percentile for serving fewer; a percentile that
// lands on a failure is null.
func TestTTFTSentCountsFailuresAsSlowest(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name          string
		ttfts         []float64 // the successes', sorted
		sent          int
		p50, p90, p99 *float64
	}{
		{"no failure: the successes' percentiles", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10, f(5), f(9), f(10)},
		{"one failure of ten moves p99 onto it", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, f(5), f(9), nil},
		{"half failed: p50 is the last success", []float64{1, 2, 3, 4, 5}, 10, f(5), nil, nil},
		{"more than half failed", []float64{1, 2, 3, 4}, 10, nil, nil, nil},
		{"nothing succeeded", nil, 3, nil, nil, nil},
		{"nothing sent", nil, 0, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarizeSent(tc.ttfts, tc.sent)
			for _, c := range []struct {
				name      string
				got, want *float64
			}{{"p50", got.P50, tc.p50}, {"p90", got.P90, tc.p90}, {"p99", got.P99, tc.p99}} {
				if (c.got == nil) != (c.want == nil) || c.got != nil && *c.got != *c.want {
					t.Errorf("%s = %v, want %v", c.name, sentString(c.got), sentString(c.want))
				}
			}
		})
	}
}

func sentString(v *float64) any {
	if v == nil {
		return "failed"
	}
	return *v
}
