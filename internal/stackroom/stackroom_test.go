package stackroom

import "testing"

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
