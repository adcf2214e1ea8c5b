//go:build !linux

package tree

import "time"

type threadStat struct {
	tid       int
	cpu       time.Duration
	preempted int64
}

// readThread is unavailable here: BenchmarkEvict64M reports wall-clock
// figures only.
func readThread() (threadStat, bool) { return threadStat{}, false }
