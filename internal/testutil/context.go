package testutil

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Context returns a context that ends with the test or after d, whichever
// comes first: a bound on one test's calls, so a hang fails the test instead
// of the package's run.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Locked returns f's result read under mu: how a test reads what a scripted
// engine recorded while its handlers may still be running.
func Locked[T any](mu *sync.Mutex, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}
