//go:build linux

package testutil

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPU returns the CPU time the calling OS thread has used, or false
// where it cannot be read. A benchmark that locks its goroutine to its
// thread (runtime.LockOSThread) times an operation on this clock beside the
// wall clock: on a shared machine the wall clock counts other processes'
// work too, the thread's CPU clock only the operation's own.
func ThreadCPU() (time.Duration, bool) {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
