package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// DefaultSLOTTFT is the time to first token a request must meet to count
// towards goodput unless --slo-ttft says otherwise: 2 s, a wait a person at
// a chat window still accepts.
const DefaultSLOTTFT = 2 * time.Second

// Sweep is one workload replayed at several speeds, each speed a full
// report over the same policies: how each policy holds up as load grows.
type Sweep struct {
	Workload string `json:"workload"`
	// SLOTTFT is the TTFT a request meets to count towards goodput.
	SLOTTFT time.Duration `json:"-"`
	// SLOTTFTMs is SLOTTFT for JSON readers.
	SLOTTFTMs float64      `json:"slo_ttft_ms"`
	Points    []SweepPoint `json:"points"`
}

// SweepPoint is the report of one speed.
type SweepPoint struct {
	Speed  float64 `json:"speed"`
	Report *Report `json:"report"`
}

// Goodput is the run's rate of successful requests whose TTFT met slo, in
// requests per second over the run's span, and their share of the requests
// sent: errors never count as good.
func (r *PolicyRun) Goodput(slo time.Duration) (perSec, share float64) {
	limit := ms(slo)
	good := 0
	for _, v := range r.TTFTs {
		if v <= limit {
			good++
		}
	}
	if len(r.TTFTs) > 0 {
		perSec = r.RequestsPerSec * float64(good) / float64(len(r.TTFTs))
	}
	if r.Requests > 0 {
		share = float64(good) / float64(r.Requests)
	}
	return perSec, share
}

// WriteJSON writes the sweep as indented JSON.
func (s *Sweep) WriteJSON(w io.Writer) error {
	s.SLOTTFTMs = ms(s.SLOTTFT)
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(s)
}

// WriteTable prints one line per speed and policy: TTFT p50, p90, p99 and
// the goodput against the SLO.
func (s *Sweep) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "speed\tpolicy\tttft p50\tp90\tp99\tsent p50\tsent p99\tgoodput/s\tmet SLO\thit\t\n")
	for _, pt := range s.Points {
		for i := range pt.Report.Runs {
			r := &pt.Report.Runs[i]
			per, share := r.Goodput(s.SLOTTFT)
			fmt.Fprintf(tw, "%g\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%.2f\t%.3f\t%.3f\t\n",
				pt.Speed, pt.Report.label(i), r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, orFailed(r.TTFTSent.P50), orFailed(r.TTFTSent.P99), per, share, r.CacheHitRate)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "goodput: successful requests per second whose TTFT met the SLO of %v; met SLO: their share of the requests sent\n"+
		"sent p50, p99: TTFT over every request sent, a failed one slower than any success (failed: the percentile is a failure)\n", s.SLOTTFT)
	return err
}

// orFailed formats a SentSummary percentile: "failed" where it fell on a
// failed request.
func orFailed(v *float64) string {
	if v == nil {
		return "failed"
	}
	return fmt.Sprintf("%.1f", *v)
}

// series are the sweep's curves: one per run label (policy, and replica
// count where a report compares several), in first-seen order, each with a
// value per speed where that run took place.
type series struct {
	label string
	x, y  []float64
}

func (s *Sweep) series(value func(*PolicyRun) float64) []series {
	var out []series
	at := map[string]int{}
	for _, pt := range s.Points {
		for i := range pt.Report.Runs {
			l := pt.Report.label(i)
			k, ok := at[l]
			if !ok {
				k = len(out)
				at[l] = k
				out = append(out, series{label: l})
			}
			out[k].x = append(out[k].x, pt.Speed)
			out[k].y = append(out[k].y, value(&pt.Report.Runs[i]))
		}
	}
	return out
}

// Layout of the sweep chart: three panels side by side, a legend below.
const (
	sweepW, sweepPanelW, sweepGap = 1180, 320, 70
	sweepX0, sweepY0, sweepY1     = 70, 90, 380
)

// WritePlot draws the sweep as an SVG: TTFT p50, TTFT p99 and goodput
// against replay speed, one line per policy in each panel. note is a line
// under the title (what the engines were).
func (s *Sweep) WritePlot(w io.Writer, note string) error {
	panels := []struct {
		title, yLabel string
		value         func(*PolicyRun) float64
	}{
		{"TTFT p50", "TTFT p50 (ms)", func(r *PolicyRun) float64 { return r.TTFT.P50 }},
		{"TTFT p99", "TTFT p99 (ms)", func(r *PolicyRun) float64 { return r.TTFT.P99 }},
		{fmt.Sprintf("Goodput (TTFT ≤ %v)", s.SLOTTFT), "requests/s meeting the SLO",
			func(r *PolicyRun) float64 { per, _ := r.Goodput(s.SLOTTFT); return per }},
	}
	labels := s.series(func(*PolicyRun) float64 { return 0 })
	h := sweepY1 + 70 + 18*len(labels)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n", sweepW, h, sweepW, h, fontFamily)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="30" y="26" font-size="17" font-weight="bold">kvgate bench: %s against replay speed</text>`+"\n", esc(s.Workload))
	if note != "" {
		p(`<text x="30" y="46" fill="#555">%s</text>`+"\n", esc(note))
	}
	for k, pn := range panels {
		x0 := float64(sweepX0 + k*(sweepPanelW+sweepGap))
		plotPanel(p, x0, pn.title, pn.yLabel, s.series(pn.value))
	}
	for i, l := range labels {
		y := sweepY1 + 60 + 18*i
		p(`<line x1="30" y1="%d" x2="54" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", y, y, color(i))
		p(`<text x="60" y="%d" dominant-baseline="middle">%s</text>`+"\n", y, esc(l.label))
	}
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plotPanel draws one panel at x0: its axes (speed across, yLabel up, both
// from their data, y from 0) and a polyline with markers per series.
func plotPanel(p func(string, ...any), x0 float64, title, yLabel string, ss []series) {
	x1 := x0 + sweepPanelW
	xLo, xHi, yHi := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for i := range s.x {
			xLo, xHi = math.Min(xLo, s.x[i]), math.Max(xHi, s.x[i])
			yHi = math.Max(yHi, s.y[i])
		}
	}
	if math.IsInf(xLo, 1) {
		xLo, xHi = 0, 1
	}
	if xHi <= xLo {
		xLo, xHi = xLo-0.5, xHi+0.5
	}
	step := niceStep(yHi)
	yTop := step * math.Max(math.Ceil(yHi/step), 1)
	x := func(v float64) float64 { return x0 + (v-xLo)/(xHi-xLo)*sweepPanelW }
	y := func(v float64) float64 { return sweepY1 - v/yTop*(sweepY1-sweepY0) }

	p(`<text x="%.1f" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, sweepY0-14, esc(title))
	for v := 0.0; v <= yTop*1.0001; v += step {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x0, y(v), x1, y(v))
		p(`<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", x0-6, y(v), trimZero(fmt.Sprintf("%.1f", v)))
	}
	seen := map[float64]bool{}
	for _, s := range ss {
		for _, v := range s.x {
			if !seen[v] {
				seen[v] = true
				p(`<text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", x(v), sweepY1+16, v)
			}
		}
	}
	p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x0, sweepY1, x1, sweepY1)
	p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x0, sweepY0, x0, sweepY1)
	p(`<text class="x-label" x="%.1f" y="%d" text-anchor="middle">replay speed (×)</text>`+"\n", (x0+x1)/2, sweepY1+34)
	p(`<text class="y-label" x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		x0-48, float64(sweepY0+sweepY1)/2, x0-48, float64(sweepY0+sweepY1)/2, esc(yLabel))
	for i, s := range ss {
		pts := make([]string, len(s.x))
		for k := range s.x {
			pts[k] = fmt.Sprintf("%.1f,%.1f", x(s.x[k]), y(s.y[k]))
		}
		p(`<polyline data-series="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", esc(s.label), color(i), strings.Join(pts, " "))
		for k := range s.x {
			p(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %g×: %.1f</title></circle>`+"\n",
				x(s.x[k]), y(s.y[k]), color(i), esc(s.label), s.x[k], s.y[k])
		}
	}
}

// niceStep is a grid step of 1, 2 or 5 × a power of ten giving about five
// lines up to hi.
func niceStep(hi float64) float64 {
	if !(hi > 0) || math.IsInf(hi, 0) {
		return 1
	}
	raw := hi / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}
