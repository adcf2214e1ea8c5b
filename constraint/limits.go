package constraint

import "fmt"

// Limits bound what a check accepts. The zero value of a field means its
// default, because a caller that sets none of them wants the safe bounds, not
// a check that refuses everything.
//
// Defaults:
//
//	MaxBytes  256 KiB (262,144 bytes) of constraint text
//	MaxDepth  64 levels of nesting (JSON arrays/objects, grammar groups, schemas)
//	MaxNodes  10,000 JSON values in a schema or rules in a grammar
//
// The defaults are far above what real schemas use (an OpenAI/Pydantic tool
// schema is a few KiB, a few levels and a few hundred values) and far below
// what would make a check, or an engine's compiler, slow.
type Limits struct {
	MaxBytes, MaxDepth, MaxNodes int
}

const (
	// DefaultMaxBytes is the size bound used when Limits.MaxBytes is zero.
	DefaultMaxBytes = 256 << 10
	// DefaultMaxDepth is the nesting bound used when Limits.MaxDepth is zero.
	DefaultMaxDepth = 64
	// DefaultMaxNodes is the node/rule bound used when Limits.MaxNodes is zero.
	DefaultMaxNodes = 10000
)

// withDefaults fills the zero fields. A negative field is treated as zero
// too: a negative bound has no meaning, and refusing everything would turn a
// configuration slip into an outage.
func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	return l
}

// checkSize is the first thing every check does, before any work that grows
// with the input.
func (l Limits) checkSize(what string, s string) error {
	if len(s) > l.MaxBytes {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), l.MaxBytes)
	}
	return nil
}
