package stackroom

import (
	"runtime/debug"
	"testing"
	"unsafe"
)

// The reserves must stay on the stack: a room that escaped to the heap
// would cost an allocation of its size per call and grow nothing.
func TestReserveAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve func()
	}{
		{"16K", Reserve16K},
		{"32K", Reserve32K},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tc.reserve); n != 0 {
				t.Fatalf("Reserve%s: %v allocations per call, want 0", tc.name, n)
			}
		})
	}
}

// frame16K needs a stack of 16 KiB: a frame of 10 KiB.
//
//go:noinline
func frame16K(i int) byte {
	var b [10 << 10]byte
	return b[i]
}

// frame32K needs a stack of 32 KiB: a frame of 20 KiB.
//
//go:noinline
func frame32K(i int) byte {
	var b [20 << 10]byte
	return b[i]
}

// grows reports whether calling deep, on a fresh goroutine after reserve,
// moved the goroutine's stack: a stack that grows is copied elsewhere, and
// a local's address changes with it.
func grows(reserve func(), big bool) bool {
	moved := make(chan bool)
	go func() {
		if reserve != nil {
			reserve()
		}
		var local byte
		before := uintptr(unsafe.Pointer(&local))
		if big {
			frame32K(7)
		} else {
			frame16K(7)
		}
		moved <- before != uintptr(unsafe.Pointer(&local))
	}()
	return <-moved
}

// TestReserveGrowsTheStack holds each reserve to its promise: after it, a
// call needing a stack of its size does not grow the stack; without it,
// the same call does (which shows the check can fail). The collector is
// off, since it may shrink a stack between the reserve and the call.
func TestReserveGrowsTheStack(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	tests := []struct {
		name    string
		reserve func()
		big     bool
		grows   bool
	}{
		{"no reserve, a 16 KiB call", nil, false, true},
		{"no reserve, a 32 KiB call", nil, true, true},
		{"Reserve16K, a 16 KiB call", Reserve16K, false, false},
		{"Reserve32K, a 16 KiB call", Reserve32K, false, false},
		{"Reserve32K, a 32 KiB call", Reserve32K, true, false},
		{"Reserve16K, a 32 KiB call", Reserve16K, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grows(tt.reserve, tt.big); got != tt.grows {
				t.Errorf("the call moved the stack: %v, want %v", got, tt.grows)
			}
		})
	}
}

// BenchmarkReserveGrow measures a reserve on a fresh goroutine, whose stack
// it grows: the copy of one frame it costs instead of the doublings deep in
// a call path.
func BenchmarkReserveGrow(b *testing.B) {
	done := make(chan struct{})
	for range b.N {
		go func() {
			Reserve32K()
			done <- struct{}{}
		}()
		<-done
	}
}

// BenchmarkReserve measures a reserve where the stack already has room,
// as on a goroutine that serves many requests: what it costs every call.
func BenchmarkReserve(b *testing.B) {
	Reserve32K()
	for b.Loop() {
		Reserve32K()
		Reserve16K()
	}
}
