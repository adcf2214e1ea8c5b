package server

import (
	"context"

	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
)

// Explain tokenizes and places a request as Generate or Chat would, so it
// takes an admission place as they do: otherwise concurrent Explain calls
// would be tokenization without a bound.
func (a *admin) Explain(ctx context.Context, req *kvgatev1.ExplainRequest) (*kvgatev1.ExplainResponse, error) {
	s := a.s
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var j *pipeline.Job
	switch r := req.GetRequest().(type) {
	case *kvgatev1.ExplainRequest_Generate:
		j, err = s.generateJob(ctx, r.Generate)
	case *kvgatev1.ExplainRequest_Chat:
		j, err = s.chatJob(ctx, r.Chat)
	default:
		return nil, fault.Invalidf("request", "request is empty; set generate or chat")
	}
	if err != nil {
		return nil, err
	}
	j.Routing = routing(ctx, metadata.New(req.GetMetadata()), j.ID)
	p, err := j.Route.Placer.Place(ctx, j, true)
	if err != nil {
		return nil, err
	}
	// The served worker is the response's worker; the decision that read
	// the prompt (the prefill leg's, in PD) gives the prediction and the
	// matches, and the other legs are reported beside it.
	first, served := &p.Legs[0], p.Decision()
	resp := &kvgatev1.ExplainResponse{
		Worker:                p.Served().URL(),
		Policy:                j.Route.Placer.PolicyName(),
		Branch:                served.Branch,
		Reason:                explainReason(p.Reason(), s.pipe.WouldWait(j), j.LeftOut()),
		PromptTokens:          uint32(len(j.InputIDs)),
		PredictedCachedTokens: uint32(first.Decision.PredictedCachedTokens),
		Workers:               a.views(j.Route, first.Decision),
	}
	if l := p.Leg("prefill"); l != nil {
		resp.PrefillWorker, resp.PrefillBranch = l.Worker.URL(), l.Decision.Branch
	}
	return resp, nil
}

// views describes every worker of the request's model as a policy saw it
// for dec.
func (a *admin) views(r *route, dec policy.Decision) []*kvgatev1.WorkerView {
	var out []*kvgatev1.WorkerView
	for _, w := range a.reg.Snapshot() {
		if !r.Serves(w) {
			continue // another model's: the policy never saw it
		}
		matched, confirmed := dec.Matched.Of(w.URL()), min(dec.Confirmed.Of(w.URL()), dec.Matched.Of(w.URL()))
		out = append(out, &kvgatev1.WorkerView{
			Address:           w.URL(),
			Health:            healthPB(w),
			Breaker:           breakerPB(w.Breaker().State()),
			Draining:          w.Draining(),
			Load:              uint32(w.Load()),
			InFlight:          uint32(w.InFlight()),
			MatchedTokens:     uint32(matched),
			ConfirmedTokens:   uint32(confirmed),
			SpeculativeTokens: uint32(matched - confirmed),
		})
	}
	return out
}

// explainReason adds to a decision's reason the notes that apply: whether the
// request would wait in the router first, which workers its prompt was kept
// from for their limits.
func explainReason(reason string, notes ...string) string {
	for _, n := range notes {
		if n != "" {
			reason += "; " + n
		}
	}
	return reason
}
