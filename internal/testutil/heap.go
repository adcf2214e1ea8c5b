package testutil

import "runtime"

// LiveHeap is the heap in use after a collection, in bytes: what a test
// holds, read before and after it builds something, without the garbage
// that happens to be waiting.
func LiveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
