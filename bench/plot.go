package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette is Tableau 10: distinct, colour-blind-friendlier hues.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

const (
	svgW, minSVGH  = 1120, 500
	cdfX0, cdfX1   = 80, 560
	barX0, barX1   = 660, 1090
	plotY0, plotY1 = 84, 370
	maxCDFPoints   = 400
	fontFamily     = "Helvetica, Arial, sans-serif"
)

// WritePlot draws the report as an SVG: the TTFT distribution of each run
// (a CDF on a logarithmic time axis) and each run's cache hit rate beside
// the oracle's, runs named by policy (and replica count when the report
// compares several). note is a line under the title (what the engines were).
func (rep *Report) WritePlot(w io.Writer, note string) error {
	svgH := max(minSVGH, plotY1+60+18*len(rep.Runs))
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n", svgW, svgH, svgW, svgH, fontFamily)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="26" font-size="17" font-weight="bold">kvgate bench: %s</text>`+"\n", cdfX0-40, esc(rep.Workload))
	if note != "" {
		p(`<text x="%d" y="46" fill="#555">%s</text>`+"\n", cdfX0-40, esc(note))
	}
	rep.plotCDF(p)
	rep.plotBars(p)
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string { return html.EscapeString(s) }

func color(i int) string { return palette[i%len(palette)] }

func (rep *Report) plotCDF(p func(string, ...any)) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rep.Runs {
		for _, v := range r.TTFTs {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 1000
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	x := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, dLo))
		return cdfX0 + (math.Log10(v)-dLo)/(dHi-dLo)*(cdfX1-cdfX0)
	}
	y := func(q float64) float64 { return plotY1 - q*(plotY1-plotY0) }

	p(`<text x="%d" y="%d" font-size="14" font-weight="bold">Time to first token (CDF)</text>`+"\n", cdfX0, plotY0-10)
	// Grid and axes.
	for q := 0.0; q <= 1.0001; q += 0.25 {
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", cdfX0, y(q), cdfX1, y(q))
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%.0f%%</text>`+"\n", cdfX0-6, y(q), q*100)
	}
	minorLabels := dHi-dLo <= 3
	for d := dLo; d <= dHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if d == dHi && m > 1 {
				break
			}
			xv := x(v)
			if m == 1 {
				p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d0d0d0"/>`+"\n", xv, plotY0, xv, plotY1)
			} else {
				p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#f0f0f0"/>`+"\n", xv, plotY0, xv, plotY1)
			}
			if m == 1 {
				p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xv, plotY1+16, msLabel(v))
			} else if minorLabels {
				p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#888" font-size="10">%s</text>`+"\n", xv, plotY1+16, msLabel(v))
			}
		}
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", cdfX0, plotY1, cdfX1, plotY1)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", cdfX0, plotY0, cdfX0, plotY1)
	p(`<text x="%d" y="%d" text-anchor="middle">TTFT (log scale)</text>`+"\n", (cdfX0+cdfX1)/2, plotY1+36)
	p(`<text transform="translate(%d %d) rotate(-90)" text-anchor="middle">requests at or below</text>`+"\n", cdfX0-48, (plotY0+plotY1)/2)

	// Curves: steps through at most maxCDFPoints quantiles.
	for i, r := range rep.Runs {
		n := len(r.TTFTs)
		if n == 0 {
			continue
		}
		var pts []string
		step := max(1, n/maxCDFPoints)
		prevY := y(0)
		for k := 0; k < n; k += step {
			xv := x(r.TTFTs[k])
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xv, prevY))
			prevY = y(float64(k+1) / float64(n))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xv, prevY))
		}
		xl := x(r.TTFTs[n-1])
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", xl, prevY), fmt.Sprintf("%.1f,%.1f", xl, y(1)))
		p(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color(i), strings.Join(pts, " "))
	}
	// Legend, with each policy's p50 and p99.
	ly := plotY1 + 60
	for i, r := range rep.Runs {
		lx := cdfX0
		yy := ly + i*18
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", lx, yy-4, lx+20, yy-4, color(i))
		p(`<text x="%d" y="%d">%s</text><text x="%d" y="%d" fill="#444">p50 %s · p90 %s · p99 %s</text>`+"\n",
			lx+26, yy, esc(rep.label(i)), lx+210, yy, msLabel(r.TTFT.P50), msLabel(r.TTFT.P90), msLabel(r.TTFT.P99))
	}
}

// msLabel writes a duration in ms as "850 µs", "12 ms" or "1.5 s".
func msLabel(v float64) string {
	switch {
	case v >= 1000:
		return trimZero(fmt.Sprintf("%.1f", v/1000)) + " s"
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 1:
		return trimZero(fmt.Sprintf("%.1f", v)) + " ms"
	}
	return fmt.Sprintf("%.0f µs", v*1000)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

func (rep *Report) plotBars(p func(string, ...any)) {
	y := func(q float64) float64 { return plotY1 - math.Max(0, math.Min(1, q))*(plotY1-plotY0) }
	p(`<text x="%d" y="%d" font-size="14" font-weight="bold">Cache hit rate vs oracle</text>`+"\n", barX0, plotY0-10)
	for q := 0.0; q <= 1.0001; q += 0.25 {
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", barX0, y(q), barX1, y(q))
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%.0f%%</text>`+"\n", barX0-6, y(q), q*100)
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", barX0, plotY1, barX1, plotY1)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", barX0, plotY0, barX0, plotY1)
	n := len(rep.Runs)
	if n == 0 {
		return
	}
	slot := float64(barX1-barX0) / float64(n)
	bw := math.Min(28, slot*0.36)
	for i, r := range rep.Runs {
		cx := float64(barX0) + slot*(float64(i)+0.5)
		hx := cx - bw - 1
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", hx, y(r.CacheHitRate), bw, plotY1-y(r.CacheHitRate), color(i))
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.0f%%</text>`+"\n", hx+bw/2, y(r.CacheHitRate)-4, r.CacheHitRate*100)
		ox := cx + 1
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4f4f4" stroke="%s" stroke-dasharray="3 2"/>`+"\n", ox, y(r.OracleHitRate), bw, plotY1-y(r.OracleHitRate), color(i))
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#666">%.0f%%</text>`+"\n", ox+bw/2, y(r.OracleHitRate)-4, r.OracleHitRate*100)
		p(`<text transform="translate(%.1f %d) rotate(-30)" text-anchor="end">%s</text>`+"\n", cx+4, plotY1+14, esc(rep.label(i)))
	}
	ly := plotY1 + 118
	p(`<rect x="%d" y="%d" width="14" height="12" fill="#888"/><text x="%d" y="%d">engine-reported hit rate</text>`+"\n", barX0, ly-10, barX0+20, ly)
	p(`<rect x="%d" y="%d" width="14" height="12" fill="#f4f4f4" stroke="#888" stroke-dasharray="3 2"/><text x="%d" y="%d">oracle (unlimited shared cache)</text>`+"\n", barX0+190, ly-10, barX0+210, ly)
}
