//go:build !linux

package policy_test

import "time"

// threadCPU is unavailable here: the benchmarks report wall-clock
// percentiles only.
func threadCPU() (time.Duration, bool) { return 0, false }
