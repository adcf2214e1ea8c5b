package sim

// speculative is what the engine reports of speculative decoding for a
// request that generated n tokens (Config.SpecDraftTokens k > 0): each
// decode step proposes k draft tokens and the model accepts half of them
// (k/2, at least 1), so a step yields 1 + k/2 tokens. It returns the draft
// tokens accepted and proposed, as GenerateComplete's spec_accepted_tokens
// and spec_draft_tokens; both 0 without speculation.
func (e *Engine) speculative(n uint32) (accepted, draft uint32) {
	k := uint32(e.cfg.SpecDraftTokens)
	if k == 0 || n == 0 {
		return 0, 0
	}
	perStep := 1 + max(k/2, 1)
	steps := (n + perStep - 1) / perStep
	return n - steps, k * steps
}
