package server

import (
	"context"
	"errors"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// maxFlushSecs bounds a FlushCache call's timeout: the engine, and the
// call, wait that long.
const maxFlushSecs = 3600

// ErrNoFlushCache: the worker's engine has no FlushCache (its protocol
// lacks it, or the engine answered UNIMPLEMENTED).
var ErrNoFlushCache = errors.New("the worker's engine does not implement FlushCache")

func (a *admin) FlushCache(ctx context.Context, req *kvgatev1.FlushCacheRequest) (*kvgatev1.FlushCacheResponse, error) {
	if a.s.fleet == nil {
		return nil, fault.Newf(fault.Unsupported, "this router cannot flush its workers' caches")
	}
	if req.GetAddress() == "" {
		return nil, fault.Invalidf("address", "address is empty; give a worker's address as ListWorkers shows it")
	}
	if req.GetTimeoutSecs() > maxFlushSecs {
		return nil, fault.Invalidf("timeout_secs", "timeout_secs is %d; the limit is %d", req.GetTimeoutSecs(), maxFlushSecs)
	}
	w, msg, err := a.s.fleet.FlushCache(ctx, req.GetAddress(), time.Duration(req.GetTimeoutSecs())*time.Second)
	switch {
	case errors.Is(err, workers.ErrWorkerNotFound):
		return nil, fault.Fieldf(fault.NotFound, "address", "%w", err)
	case errors.Is(err, ErrNoFlushCache), errors.Is(err, workers.ErrFlushRefused):
		return nil, fault.Newf(fault.Precondition, "%w", err)
	case err != nil:
		return nil, fault.Newf(fault.Unavailable, "%w", err)
	}
	a.s.log.InfoContext(ctx, "worker's cache flushed", "worker", w.URL(), "message", msg)
	return &kvgatev1.FlushCacheResponse{Worker: a.workerPB(w), Message: msg}, nil
}
