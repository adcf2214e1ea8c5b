//go:build linux

package tree

import (
	"syscall"
	"time"
	"unsafe"
)

// threadStat is what the calling OS thread has had of the machine: on a
// shared machine a wall-clock figure's tail is mostly other processes'
// scheduling, and these tell the two apart (BenchmarkEvict64M).
type threadStat struct {
	tid int
	cpu time.Duration // CPU time used
	// preempted counts the times the kernel took the CPU from the thread
	// while it could have run on (involuntary context switches).
	preempted int64
}

// readThread returns the calling thread's figures, or false where they
// cannot be read.
func readThread() (threadStat, bool) {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	const rusageThread = 1       // RUSAGE_THREAD
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return threadStat{}, false
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return threadStat{}, false
	}
	return threadStat{tid: syscall.Gettid(), cpu: time.Duration(ts.Nano()), preempted: ru.Nivcsw}, true
}
