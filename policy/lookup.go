package policy

import "github.com/kvgate/kvgate/tree"

// Lookup returns each worker's match of ids in the index (the longest
// whole-page prefix it holds, and the part of it its engine's KV events
// confirmed), changing nothing. It is the prefix match a selection makes,
// without the decision and the speculative insert that follow it: what an
// indexer benchmark compares with other routers' indexers. The result's
// Tenants are appended to dst[:0], so a caller matching many prompts can
// pass the last result's Tenants back instead of allocating each time.
func (c *CacheAware) Lookup(dst []tree.TenantMatch, ids []uint32) tree.Match {
	return c.tree.MatchAppend(dst, ids)
}
