package server

import (
	"context"

	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

func (a *admin) Explain(ctx context.Context, req *kvgatev1.ExplainRequest) (*kvgatev1.ExplainResponse, error) {
	if field, bad := undecodable(req); bad {
		return nil, invalid("%s is not valid UTF-8", field)
	}
	s := a.s
	var (
		j   *job
		err error
	)
	switch r := req.GetRequest().(type) {
	case *kvgatev1.ExplainRequest_Generate:
		j, err = s.generateJob(r.Generate)
	case *kvgatev1.ExplainRequest_Chat:
		j, err = s.chatJob(r.Chat)
	default:
		return nil, invalid("request is empty; set generate or chat")
	}
	if err != nil {
		return nil, err
	}
	j.metadata = metadata.New(req.GetMetadata())
	if s.pd != nil {
		return a.explainPD(ctx, j)
	}
	dec, err := s.decide(ctx, j, true)
	if err != nil {
		return nil, err
	}
	resp := &kvgatev1.ExplainResponse{
		Worker:                dec.Worker.URL(),
		Policy:                s.policy.Name(),
		Branch:                dec.Branch,
		Reason:                dec.Reason,
		PromptTokens:          uint32(len(j.inputIDs)),
		PredictedCachedTokens: uint32(dec.PredictedCachedTokens),
	}
	resp.Workers = a.views(dec.Matched)
	return resp, nil
}

// explainPD is Explain with prefill/decode disaggregation: the decode worker
// is the response's worker, the prefill worker and its rule are reported
// beside it, and matches are the prefill policy's.
func (a *admin) explainPD(ctx context.Context, j *job) (*kvgatev1.ExplainResponse, error) {
	dec, _, err := a.s.decidePD(ctx, j, true)
	if err != nil {
		return nil, err
	}
	return &kvgatev1.ExplainResponse{
		Worker:                dec.Decode.Worker.URL(),
		Policy:                a.s.pdPrefillName,
		Branch:                dec.Decode.Branch,
		Reason:                "prefill: " + dec.Prefill.Reason + "; decode: " + dec.Decode.Reason,
		PromptTokens:          uint32(len(j.inputIDs)),
		PredictedCachedTokens: uint32(dec.Prefill.PredictedCachedTokens),
		Workers:               a.views(dec.Prefill.Matched),
		PrefillWorker:         dec.Prefill.Worker.URL(),
		PrefillBranch:         dec.Prefill.Branch,
	}, nil
}

// views describes every worker as a policy saw it.
func (a *admin) views(matched map[string]int) []*kvgatev1.WorkerView {
	var out []*kvgatev1.WorkerView
	for _, w := range a.reg.Snapshot() {
		h := kvgatev1.Health_HEALTH_UNHEALTHY
		if w.Healthy() {
			h = kvgatev1.Health_HEALTH_HEALTHY
		}
		out = append(out, &kvgatev1.WorkerView{
			Address:       w.URL(),
			Health:        h,
			Load:          uint32(w.Load()),
			InFlight:      uint32(w.InFlight()),
			MatchedTokens: uint32(matched[w.URL()]),
		})
	}
	return out
}
