package server

import (
	"context"

	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
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
	var j *job
	switch r := req.GetRequest().(type) {
	case *kvgatev1.ExplainRequest_Generate:
		j, err = s.generateJob(ctx, r.Generate)
	case *kvgatev1.ExplainRequest_Chat:
		j, err = s.chatJob(ctx, r.Chat)
	default:
		return nil, invalid("request is empty; set generate or chat")
	}
	if err != nil {
		return nil, err
	}
	j.metadata = metadata.New(req.GetMetadata())
	p, err := j.route.Placer.place(ctx, j, true)
	if err != nil {
		return nil, err
	}
	switch p := p.(type) {
	case *pair:
		// The decode worker is the response's worker; the prefill worker
		// and its rule are reported beside it, and matches are the prefill
		// policy's.
		return &kvgatev1.ExplainResponse{
			Worker:                p.dec.Decode.Worker.URL(),
			Policy:                j.route.Placer.policyName(),
			Branch:                p.dec.Decode.Branch,
			Reason:                "prefill: " + p.dec.Prefill.Why() + "; decode: " + p.dec.Decode.Why(),
			PromptTokens:          uint32(len(j.inputIDs)),
			PredictedCachedTokens: uint32(p.dec.Prefill.PredictedCachedTokens),
			Workers:               a.views(j.route, p.dec.Prefill),
			PrefillWorker:         p.dec.Prefill.Worker.URL(),
			PrefillBranch:         p.dec.Prefill.Branch,
		}, nil
	default:
		dec := p.decision()
		return &kvgatev1.ExplainResponse{
			Worker:                dec.Worker.URL(),
			Policy:                j.route.Placer.policyName(),
			Branch:                dec.Branch,
			Reason:                dec.Why(),
			PromptTokens:          uint32(len(j.inputIDs)),
			PredictedCachedTokens: uint32(dec.PredictedCachedTokens),
			Workers:               a.views(j.route, dec),
		}, nil
	}
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
