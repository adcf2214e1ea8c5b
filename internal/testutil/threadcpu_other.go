//go:build !linux

package testutil

import "time"

// ThreadCPU reports false: the thread's CPU clock is read on Linux only.
func ThreadCPU() (time.Duration, bool) { return 0, false }
