package testutil

import "github.com/kvgate/kvgate/fault"

// IsFault reports whether err carries a fault of kind k: what a test of an
// inner package checks where a test of the gRPC front checks the status
// code the edge makes of it.
func IsFault(err error, k fault.Kind) bool {
	got, ok := fault.KindOf(err)
	return ok && got == k
}
