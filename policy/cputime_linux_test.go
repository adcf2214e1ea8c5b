//go:build linux

package policy_test

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU returns the CPU time the calling OS thread has used, or false
// where it cannot be read. The benchmarks lock their goroutine to its thread
// and time each operation on this clock as well as the wall clock: on a
// shared machine the wall clock's tail is other processes' scheduling, the
// CPU clock's is the operation's own.
func threadCPU() (time.Duration, bool) {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
