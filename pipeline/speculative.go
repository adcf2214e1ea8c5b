package pipeline

import (
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers"
)

// speculativeUsage copies the engine's speculative decoding counts into the
// client's usage (fin nil, as when a stop string ended the request in the
// router: the engine reported none). The counts are the engine's own: the
// router has nothing to check them against, unlike the tokens it relayed.
func speculativeUsage(u *kvgatev1.Usage, fin *workers.Completion) {
	if u == nil || fin == nil {
		return
	}
	u.SpecDraftTokens, u.SpecAcceptedTokens = fin.SpecDraftTokens, fin.SpecAcceptedTokens
}
