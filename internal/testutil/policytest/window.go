// Package policytest holds test helpers that wrap routing policies or
// teach workers what policies read. It is apart from testutil because
// package policy's own tests use testutil.
package policytest

import (
	"context"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// InWindow runs During once, as soon as the policy it wraps has decided a
// request (not a dry run): between that selection and the worker's
// Acquire, the window a starved machine's other selections fall into.
// During is nil once it ran.
type InWindow struct {
	policy.Policy
	During func()
}

// Select is the wrapped policy's, then During.
func (p *InWindow) Select(ctx context.Context, req *policy.Request, cands []workers.View) (policy.Decision, error) {
	d, err := p.Policy.Select(ctx, req, cands)
	if f := p.During; f != nil && !req.DryRun {
		p.During = nil
		f()
	}
	return d, err
}
