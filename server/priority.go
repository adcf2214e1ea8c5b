package server

import (
	"context"
	"strconv"

	"github.com/kvgate/kvgate/fault"
)

// priorityHeader is the metadata a client sets a request's priority class
// with: an integer, lower served first, as vLLM's request priority; 0 when
// absent. It orders the request among those waiting in the router (late
// binding); a request that does not wait is not affected.
const priorityHeader = "kvgate-priority"

// maxPriority bounds a priority class either way: enough classes for any
// scheme of tiers, few enough that the value means something.
const maxPriority = 1000

// priorityOf reads the call's kvgate-priority metadata.
func priorityOf(ctx context.Context) (int, error) {
	v := incomingHeader(ctx, []string{priorityHeader})
	if v == "" {
		return 0, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < -maxPriority || p > maxPriority {
		return 0, fault.Invalidf(priorityHeader,
			"%s metadata is %.20q; it must be an integer from %d to %d (lower is served first; default 0)",
			priorityHeader, v, -maxPriority, maxPriority)
	}
	return p, nil
}
