package server

import (
	"context"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
)

func (a *admin) ListModels(context.Context, *kvgatev1.ListModelsRequest) (*kvgatev1.ListModelsResponse, error) {
	resp := &kvgatev1.ListModelsResponse{}
	for _, r := range a.s.models.All() {
		m := &kvgatev1.Model{Name: r.Name, Policy: r.Main().Name(), Tokenizer: r.TokenizerSource, PageSize: uint32(max(r.PageSize, 0))}
		if r.PD != nil {
			m.DecodePolicy = r.PD.DecodePolicyName()
		}
		for _, w := range a.reg.Snapshot() {
			if r.Serves(w) {
				m.Workers = append(m.Workers, w.URL())
			}
		}
		if r.Text != nil {
			m.VocabSize = uint32(r.Text.Tokenizer().VocabSize())
			m.ChatTemplate = r.Text.TemplateSource()
		}
		if t, ok := r.Main().(policy.TreeStatser); ok {
			m.TreeTokens = uint64(max(t.TreeStats().Tokens, 0))
		}
		resp.Models = append(resp.Models, m)
	}
	return resp, nil
}
