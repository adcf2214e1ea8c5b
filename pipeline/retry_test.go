package pipeline

import "testing"

// The retry budget, as a specification: each worker able to serve takes its
// share of the requests in flight, and at least --retry-budget-per-worker;
// never fewer than --retry-budget-percent of them, nor than the minimum.
func TestRetryBudget(t *testing.T) {
	d := DefaultRetryConfig()
	tests := []struct {
		name             string
		cfg              RetryConfig
		active           int64
		able, registered int
		want             int64
	}{
		{"a quiet router: 16 per worker able", d, 1, 4, 4, 64},
		{"one of 4 workers failed, 64 in flight: 16 for each of the 3 able", d, 64, 3, 4, 48},
		{"one of 4 workers failed, 1,000 in flight: each able worker's share", d, 1000, 3, 4, 750},
		{"3 of 4 failed, 8 in flight: 16 for the one left", d, 8, 1, 4, 16},
		{"3 of 4 failed, 1,000 in flight: the one left's share, 250, above 20%", d, 1000, 1, 4, 250},
		{"the whole fleet failed: 20% of the requests in flight", d, 64, 0, 4, 12},
		{"the whole fleet failed, few requests: the minimum", d, 10, 0, 4, 3},
		{"no workers registered: the percentage", d, 100, 0, 0, 20},
		{"PD 4+4 with a prefill worker killed", d, 64, 7, 8, 112},
		{"a budget of 100% is every request in flight", RetryConfig{BudgetPercent: 100}, 64, 0, 4, 64},
		{"no percentage, no minimum, no worker able: none", RetryConfig{}, 64, 0, 4, 0},
		{"no allowance per worker: the able worker's share", RetryConfig{}, 64, 1, 2, 32},
		{"the share rounds down", RetryConfig{}, 1, 1, 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.budget(tc.active, tc.able, tc.registered); got != tc.want {
				t.Fatalf("budget(active %d, %d of %d workers able) = %d, want %d",
					tc.active, tc.able, tc.registered, got, tc.want)
			}
		})
	}
}

// Properties of the budget over every small fleet and load: it never allows
// fewer retries than Envoy's budget, nor fewer than the able workers' share
// of the requests in flight and their allowance; it grows with the workers
// able to serve; and with no worker able, it is Envoy's budget exactly, so a
// fleet failing as a whole gets no more retries than Envoy's budget allows.
func TestRetryBudgetProperties(t *testing.T) {
	for _, pct := range []float64{0, 20, 50, 100} {
		for _, minimum := range []int{0, 3} {
			for _, perWorker := range []int{0, 16} {
				c := RetryConfig{BudgetPercent: pct, MinRetryConcurrency: minimum, RetriesPerWorker: perWorker}
				for active := int64(0); active <= 200; active++ {
					envoy := max(int64(minimum), int64(float64(active)*pct/100))
					for registered := 0; registered <= 16; registered++ {
						prev := int64(-1)
						for able := 0; able <= registered; able++ {
							got := c.budget(active, able, registered)
							switch {
							case got < envoy:
								t.Fatalf("%+v: budget(%d, %d of %d) = %d, below Envoy's %d", c, active, able, registered, got, envoy)
							case able > 0 && got < int64(able)*max(int64(perWorker), active/int64(registered)):
								t.Fatalf("%+v: budget(%d, %d of %d) = %d, less than the able workers' share and allowance", c, active, able, registered, got)
							case got < prev:
								t.Fatalf("%+v: budget(%d, %d of %d) = %d, less than with one worker fewer (%d)", c, active, able, registered, got, prev)
							case able == 0 && got != envoy:
								t.Fatalf("%+v: budget(%d, none of %d) = %d, want Envoy's %d", c, active, registered, got, envoy)
							}
							prev = got
						}
					}
				}
			}
		}
	}
}
