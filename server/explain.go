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
	for _, w := range s.reg.Snapshot() {
		h := kvgatev1.Health_HEALTH_UNHEALTHY
		if w.Healthy() {
			h = kvgatev1.Health_HEALTH_HEALTHY
		}
		resp.Workers = append(resp.Workers, &kvgatev1.WorkerView{
			Address:       w.URL(),
			Health:        h,
			Load:          uint32(w.Load()),
			InFlight:      uint32(w.InFlight()),
			MatchedTokens: uint32(dec.Matched[w.URL()]),
		})
	}
	return resp, nil
}
