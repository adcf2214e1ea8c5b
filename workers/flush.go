package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// CacheFlusher is implemented by the backends whose protocol has FlushCache
// (SGLang's and vLLM's): the engine drops its prefix cache.
type CacheFlusher interface {
	// FlushCache asks the engine to flush, waiting up to timeout for its
	// running requests (0: at once). It returns the engine's message; an
	// engine that answers but does not flush is ErrFlushRefused.
	FlushCache(ctx context.Context, timeout time.Duration) (string, error)
}

// ErrFlushRefused: the engine answered FlushCache without flushing (SGLang
// and vLLM refuse while requests run).
var ErrFlushRefused = errors.New("the engine did not flush its cache")

var (
	_ CacheFlusher = (*sglangBackend)(nil)
	_ CacheFlusher = (*vllmBackend)(nil)
)

func (b *sglangBackend) FlushCache(ctx context.Context, timeout time.Duration) (string, error) {
	return flushed(b.c.FlushCache(ctx, flushRequest(timeout)))
}

func (b *vllmBackend) FlushCache(ctx context.Context, timeout time.Duration) (string, error) {
	return flushed(b.c.FlushCache(ctx, flushRequest(timeout)))
}

func flushRequest(timeout time.Duration) *smgcommon.FlushCacheRequest {
	return &smgcommon.FlushCacheRequest{TimeoutS: float32(timeout.Seconds())}
}

func flushed(resp *smgcommon.FlushCacheResponse, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if !resp.GetSuccess() {
		return resp.GetMessage(), fmt.Errorf("%w: %q", ErrFlushRefused, resp.GetMessage())
	}
	return resp.GetMessage(), nil
}
