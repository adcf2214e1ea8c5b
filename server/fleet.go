package server

import (
	"context"
	"errors"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// Fleet changes the set of workers while the router runs; the router
// implements it. AddWorker's errors are the request's fault (a bad address,
// a role the router does not serve) or wrap workers.ErrWorkerExists,
// workers.ErrIncompatible (an engine whose model does not fit the fleet),
// ErrWorkerNotAllowed or ErrTooManyWorkers;
// RemoveWorker's wrap workers.ErrWorkerNotFound or are the router's.
type Fleet interface {
	AddWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error)
	RemoveWorker(ctx context.Context, addr string, drain time.Duration) (w *workers.Worker, cut int, err error)
	// FlushCache flushes an engine's prefix cache and forgets what the
	// policies mirror of it (see Admin.FlushCache); it returns the worker
	// and the engine's message.
	FlushCache(ctx context.Context, addr string, timeout time.Duration) (w *workers.Worker, message string, err error)
}

// maxDrainSecs bounds a RemoveWorker call's drain timeout: the call waits
// that long.
const maxDrainSecs = 3600

func (a *admin) AddWorker(ctx context.Context, req *kvgatev1.AddWorkerRequest) (*kvgatev1.AddWorkerResponse, error) {
	if a.s.fleet == nil {
		return nil, fault.Newf(fault.Unsupported, "this router's fleet is fixed")
	}
	if req.GetAddress() == "" {
		return nil, fault.Invalidf("address", "address is empty; give grpc://host:port, grpcs://host:port or host:port")
	}
	role := workers.RoleRegular
	switch req.GetRole() {
	case kvgatev1.Role_ROLE_PREFILL:
		role = workers.RolePrefill
	case kvgatev1.Role_ROLE_DECODE:
		role = workers.RoleDecode
	}
	proto := workers.ProtocolUnknown
	switch req.GetProtocol() {
	case kvgatev1.Protocol_PROTOCOL_SGLANG:
		proto = workers.ProtocolSGLang
	case kvgatev1.Protocol_PROTOCOL_VLLM:
		proto = workers.ProtocolVLLM
	case kvgatev1.Protocol_PROTOCOL_TRTLLM:
		proto = workers.ProtocolTRTLLM
	}
	if req.GetBootstrapPort() > 65535 {
		return nil, fault.Invalidf("bootstrap_port", "bootstrap_port is %d; a port is at most 65535", req.GetBootstrapPort())
	}
	w, err := a.s.fleet.AddWorker(ctx, req.GetAddress(), role, proto, int(req.GetBootstrapPort()))
	switch {
	case errors.Is(err, workers.ErrWorkerExists):
		return nil, fault.Fieldf(fault.Exists, "address", "%w", err)
	case errors.Is(err, workers.ErrIncompatible), errors.Is(err, ErrWorkerNotAllowed):
		return nil, fault.Newf(fault.Precondition, "%w", err)
	case errors.Is(err, ErrTooManyWorkers):
		return nil, fault.Newf(fault.TooLarge, "%w", err)
	case err != nil:
		return nil, fault.Newf(fault.Invalid, "%w", err)
	}
	a.s.log.InfoContext(ctx, "worker added", "worker", w.URL(), "connected", w.Connected())
	return &kvgatev1.AddWorkerResponse{Worker: a.workerPB(w)}, nil
}

func (a *admin) RemoveWorker(ctx context.Context, req *kvgatev1.RemoveWorkerRequest) (*kvgatev1.RemoveWorkerResponse, error) {
	if a.s.fleet == nil {
		return nil, fault.Newf(fault.Unsupported, "this router's fleet is fixed")
	}
	if req.GetDrainTimeoutSecs() > maxDrainSecs {
		return nil, fault.Invalidf("drain_timeout_secs", "drain_timeout_secs is %d; the limit is %d", req.GetDrainTimeoutSecs(), maxDrainSecs)
	}
	w, cut, err := a.s.fleet.RemoveWorker(ctx, req.GetAddress(), time.Duration(req.GetDrainTimeoutSecs())*time.Second)
	switch {
	case errors.Is(err, workers.ErrWorkerNotFound):
		return nil, fault.Fieldf(fault.NotFound, "address", "%w", err)
	case err != nil:
		return nil, fault.Newf(fault.Bug, "%w", err)
	}
	return &kvgatev1.RemoveWorkerResponse{Worker: a.workerPB(w), Aborted: uint32(cut)}, nil
}

// workerPB describes a worker as ListWorkers shows it.
func (a *admin) workerPB(w *workers.Worker) *kvgatev1.Worker {
	el, info := w.EngineLoad(), w.Info()
	pb := &kvgatev1.Worker{
		Address:       w.URL(),
		Protocol:      protocolPB(w.Protocol()),
		Role:          rolePB(w.Role()),
		Health:        healthPB(w),
		InFlight:      uint32(w.InFlight()),
		Model:         info.Model,
		EngineRunning: uint32(max(el.Running, 0)),
		EngineWaiting: uint32(max(el.Waiting, 0)),
		KvUsage:       el.TokenUsage,
		Breaker:       breakerPB(w.Breaker().State()),
		Draining:      w.Draining(),
		Connecting:    !w.Connected(),
		HealthCheck:   w.HealthCheckInUse(),
		VocabSize:     uint32(max(info.VocabSize, 0)),
		PageSize:      uint32(max(info.PageSize, 0)),

		MaxContextLength:   uint32(max(info.MaxContextLength, 0)),
		MaxInputTokens:     uint32(max(info.MaxInputTokens, 0)),
		TruncatesPrompts:   info.TruncatesPrompts,
		KvCapacityTokens:   uint32(max(info.KVCapacityTokens, 0)),
		MaxRunningRequests: uint32(max(info.MaxRunningRequests, 0)),
	}
	if pb.VocabSize == 0 {
		if r := a.s.models.Of(w); r != nil {
			pb.VocabSize = uint32(r.PromptVocab(w))
		}
	}
	if a.s.kvEvents != nil {
		if st, ok := a.s.kvEvents.Status(w.URL()); ok {
			pb.KvEvents = kvEventStreamPB(st)
		}
	}
	return pb
}

// kvEventStreamPB describes a worker's KV event subscription.
func kvEventStreamPB(st workers.KVEventStatus) *kvgatev1.KvEventStream {
	pb := &kvgatev1.KvEventStream{
		Mode:       string(st.Mode),
		Connected:  st.Connected,
		LagSeconds: st.Lag.Seconds(),
		Batches:    st.Batches,
		Events:     st.Stored + st.Removed + st.Cleared,
		Gaps:       st.Gaps,
		Resets:     st.Resets,
		Resyncs:    st.Resyncs,
		Duplicates: st.Duplicates,
		Failures:   st.Failures,
		LastError:  st.LastError,
	}
	if st.HasLastSeq {
		pb.LastSequenceNumber = &st.LastSeq
	}
	return pb
}

func healthPB(w *workers.Worker) kvgatev1.Health {
	if w.Healthy() {
		return kvgatev1.Health_HEALTH_HEALTHY
	}
	return kvgatev1.Health_HEALTH_UNHEALTHY
}

func breakerPB(s workers.BreakerState) kvgatev1.BreakerState {
	switch s {
	case workers.BreakerOpen:
		return kvgatev1.BreakerState_BREAKER_STATE_OPEN
	case workers.BreakerHalfOpen:
		return kvgatev1.BreakerState_BREAKER_STATE_HALF_OPEN
	}
	return kvgatev1.BreakerState_BREAKER_STATE_CLOSED
}
