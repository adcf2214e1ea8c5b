package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// fmtReason is the reason as fmt wrote it before it was written with
// strconv: the reference TestReasonTextIsFmts and FuzzReasonText hold the
// reason to, so that log pipelines and Explain clients reading the text see
// no change.
func fmtReason(c *waitChoice, m waitModel, ws []workers.View, inputLen int) string {
	ms := func(sec float64) string { return fmt.Sprintf("%.0fms", 1000*sec) }
	t := c.named
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s ", c.branch(), ws[c.chosen].URL())
	if c.seeded {
		fmt.Fprintf(&b, "is idle and holds nothing while a worker carries %d; it ", c.busiest)
	}
	s := fmt.Sprintf("%s = max(slot %s", ms(t.total), ms(t.slot))
	if t.ahead > 0 {
		s += fmt.Sprintf(" (%d ahead)", t.ahead)
	}
	s += fmt.Sprintf(", lane %s (%d queued)) + own %s (%d prompt − %d cached)", ms(t.lane), t.queue, ms(t.own), inputLen, t.matched)
	if t.step > 0 {
		s += fmt.Sprintf(" + step %s (%g steps)", ms(t.step), m.stepWeight)
	}
	if t.slows > 0 {
		s += fmt.Sprintf(" + slows %s (%d running beside it", ms(t.slows), t.beside)
		if t.share < materialStepShare {
			s += fmt.Sprintf(", × %.2f: a request lengthens a step %.1f%%", t.share/materialStepShare, 100*t.share)
		}
		s += ")"
	}
	if t.evictS > 0 {
		s += fmt.Sprintf(" + evict %s (%g × %d)", ms(t.evictS), m.evictWeight, t.evict)
	}
	if t.fleet > 0 {
		cmp := "<"
		if c.soonest >= c.whole {
			cmp = "≥"
		}
		s += fmt.Sprintf(" + fleet %s (pressure %.2f × %g: soonest start %s %s whole prefill %s)",
			ms(t.fleet), c.pressure, m.fleetWeight, ms(c.soonest), cmp, ms(c.whole))
	}
	if t.uneven > 0 {
		s += fmt.Sprintf(" + uneven %s (pressure %.2f × %g × (start %s − soonest %s))",
			ms(t.uneven), c.pressure, m.unevenWeight, ms(max(t.slot, t.lane)), ms(c.soonest))
	}
	fmt.Fprintf(&b, "expects %s", s)
	if c.second >= 0 {
		fmt.Fprintf(&b, "; next %s %s", ws[c.second].URL(), ms(c.secondTotal))
	}
	return b.String()
}

// reasonViews returns two workers' views for a reason to name.
func reasonViews() []workers.View {
	ws := make([]*workers.Worker, 2)
	for i := range ws {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
			workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	}
	return workers.Views(ws)
}

// settledChoice is a choice as settle leaves it, with every term reason
// can name set from the arguments.
func settledChoice(f [11]float64, n [6]int, seeded bool, second int) *waitChoice {
	return &waitChoice{
		settled: true, seeded: seeded, busiest: n[5], second: second, secondTotal: f[10],
		soonest: f[7], whole: f[8], pressure: f[9],
		named: waitTerms{
			matched: n[0], evict: n[1], queue: n[2], ahead: n[3], beside: n[4],
			slot: f[0], lane: f[1], own: f[2], step: f[3], slows: f[4], evictS: f[5],
			fleet: f[6], uneven: f[6] / 3, total: f[0] + f[2], share: f[9] / 4,
		},
	}
}

func TestReasonTextIsFmts(t *testing.T) {
	ws := reasonViews()
	m := waitModel{stepWeight: 1.5, evictWeight: 0.25, fleetWeight: 1, unevenWeight: 0.5}
	tests := []struct {
		name   string
		f      [11]float64
		n      [6]int
		seeded bool
		second int
	}{
		{"only the slot and lane, no runner-up", [11]float64{0.012, 0.004, 0.1}, [6]int{512}, false, -1},
		{"every term", [11]float64{0.5, 1.25, 0.75, 0.02, 0.3, 0.001, 0.4, 1.2, 0.9, 0.03, 2.5},
			[6]int{1024, 77, 3, 2, 7, 40}, false, 1},
		{"the start-up rule's idle worker", [11]float64{0, 0, 0.2, 0, 0, 0, 0, 0, 0, 0, 0.2}, [6]int{0, 0, 0, 0, 0, 12}, true, 1},
		{"halves round to even milliseconds", [11]float64{0.0005, 0.0015, 0.0025, 0.0035, 0.0045, 0.0055, 0.0065, 0.0075, 0.0085, 0.0095, 0.0105},
			[6]int{1, 1, 1, 1, 1, 1}, false, 1},
		{"soonest at least the whole prefill", [11]float64{1, 2, 3, 0, 0, 0, 0.5, 4, 4, 1, 9}, [6]int{}, false, 0},
		{"huge, tiny and negative", [11]float64{1e300, -1e-300, 5e-324, 1e21, 3e-7, -0.0, 1e-9, math.MaxFloat64, 0, 0.099, -2},
			[6]int{math.MaxInt, math.MinInt, -1, 1 << 40, 9, -5}, false, 1},
		{"not numbers", [11]float64{math.NaN(), math.Inf(1), math.Inf(-1), math.NaN(), math.Inf(1), math.Inf(1), math.Inf(1), math.NaN(), math.Inf(-1), math.NaN(), math.Inf(1)},
			[6]int{}, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := settledChoice(tc.f, tc.n, tc.seeded, tc.second)
			want := fmtReason(c, m, ws, 2048)
			if got := c.reason(m, ws, 2048); got != want {
				t.Errorf("reason\n got %q\nwant %q (fmt's)", got, want)
			}
		})
	}
}

// FuzzReasonText holds the reason to fmt's text over any terms.
func FuzzReasonText(f *testing.F) {
	f.Add(0.5, 1.25, 0.75, 0.02, 0.3, 0.001, 0.4, 1.2, 0.9, 0.03, 2.5, 1024, 77, 3, 2, 7, 40, false, 1.5, 0.25)
	f.Add(1e300, -1e-300, 5e-324, 1e21, 3e-7, 0.0, 1e-9, 0.0, 0.0, 0.099, -2.0, -1, 0, 1<<40, 9, -5, 3, true, 1e-7, 123456789.0)
	ws := reasonViews()
	f.Fuzz(func(t *testing.T, f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10 float64, n0, n1, n2, n3, n4, n5 int, seeded bool, step, evict float64) {
		m := waitModel{stepWeight: step, evictWeight: evict, fleetWeight: f9 * 7, unevenWeight: f10 / 3}
		for second := -1; second <= 1; second++ {
			c := settledChoice([11]float64{f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10}, [6]int{n0, n1, n2, n3, n4, n5}, seeded, second)
			want := fmtReason(c, m, ws, n0+n1)
			if got := c.reason(m, ws, n0+n1); got != want {
				t.Fatalf("reason\n got %q\nwant %q (fmt's)", got, want)
			}
		}
	})
}
