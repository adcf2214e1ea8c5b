package main

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestDownTime pins how the down time is read from the probes, since the
// suite's main figure rests on it.
func TestDownTime(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ok := func(start, end float64) probe { return probe{start: at(start), end: at(end), code: codes.OK} }
	fail := func(start, end float64, c codes.Code) probe { return probe{start: at(start), end: at(end), code: c} }
	tests := []struct {
		name     string
		probes   []probe
		want     float64
		wantOpen bool
	}{
		{"no failure is no down time, however slow",
			[]probe{ok(0, 0.1), ok(0.1, 4), ok(0.2, 0.3)}, 0, false},
		{"one failure: from the success before it to the success after it",
			[]probe{ok(0, 0.1), fail(0.1, 0.15, codes.Unavailable), ok(0.2, 0.3)}, 0.2, false},
		{"probes queued until the attack stopped count until they are served",
			[]probe{ok(0, 0.1), fail(0.2, 5.2, codes.DeadlineExceeded), fail(0.3, 5.3, codes.DeadlineExceeded),
				ok(12, 15), ok(15.1, 15.2)}, 14.9, false},
		{"the longest of two outages",
			[]probe{fail(0, 0.1, codes.Unavailable), ok(1, 1.1), fail(2, 2.1, codes.Unavailable), ok(5, 5.1)}, 4, false},
		{"still failing at the end is open, up to the end",
			[]probe{ok(0, 0.1), fail(1, 1.1, codes.Unavailable), fail(2, 2.1, codes.Unavailable)}, 9.9, true},
		{"failures before the start do not count",
			[]probe{fail(-3, -2, codes.Unavailable), ok(-1, -0.9), ok(0.5, 0.6)}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, open := downTime(tt.probes, t0, at(10))
			if d := got.Seconds() - tt.want; d > 1e-9 || d < -1e-9 || open != tt.wantOpen {
				t.Errorf("downTime = %v, open %v; want %vs, open %v", got, open, tt.want, tt.wantOpen)
			}
		})
	}
}
