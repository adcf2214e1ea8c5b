package pd_test

import (
	"context"
	"sync"
	"testing"
	"time"
)

// testCtx returns a context that ends with the test or after 5 s.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// locked returns f's result read under mu, for the scripted engines' records.
func locked[T any](mu *sync.Mutex, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}
