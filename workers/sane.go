package workers

import "math"

// What an engine reports of itself (its model information, its loads) is
// read once here, where the router stores it, whatever the protocol: a
// figure no engine can mean is taken as unreported, so that a buggy or
// lying engine degrades to one that says less, never to one whose numbers
// turn the router's arithmetic over. SGLang sends its server settings as
// JSON numbers, and a page size of 1e300 converted to int is negative on
// amd64; an int32 field may be negative on any protocol.

// Bounds of a figure an engine can mean; past them it is unreported.
const (
	// maxPageTokens is the largest KV page (block) the router takes: the
	// engines' own choices are 1 to 512 tokens.
	maxPageTokens = 1 << 16
	// maxCapacityTokens is the largest KV cache the router takes, far
	// beyond any engine's, and small enough that the policies' multiples
	// of it do not overflow.
	maxCapacityTokens = 1 << 40
)

// sane returns i with each limit that is negative, or beyond its bound,
// read as unreported (0).
func (i ModelInfo) sane() ModelInfo {
	i.VocabSize = within(i.VocabSize, math.MaxInt32)
	i.MaxContextLength = within(i.MaxContextLength, math.MaxInt32)
	i.MaxInputTokens = within(i.MaxInputTokens, math.MaxInt32)
	i.PageSize = within(i.PageSize, maxPageTokens)
	i.KVCapacityTokens = within(i.KVCapacityTokens, maxCapacityTokens)
	i.MaxRunningRequests = within(i.MaxRunningRequests, math.MaxInt32)
	i.BootstrapPort = within(i.BootstrapPort, math.MaxUint16)
	return i
}

// sane returns l with negative counts read as 0 and its fractions held
// to [0, 1] (0 for a NaN).
func (l Load) sane() Load {
	l.Running = within(l.Running, math.MaxInt32)
	l.Waiting = within(l.Waiting, math.MaxInt32)
	l.UsedTokens = within(l.UsedTokens, maxCapacityTokens)
	l.MaxTotalTokens = within(l.MaxTotalTokens, maxCapacityTokens)
	l.MaxRunning = within(l.MaxRunning, math.MaxInt32)
	l.TokenUsage = fraction(l.TokenUsage)
	l.CacheHitRate = fraction(l.CacheHitRate)
	return l
}

// within returns v when it is in [0, limit], else 0.
func within(v, limit int) int {
	if v < 0 || v > limit {
		return 0
	}
	return v
}

// fraction returns x held to [0, 1], 0 for a NaN.
func fraction(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return min(max(x, 0), 1)
}
