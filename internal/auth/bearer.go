package auth

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// Bearer returns per-RPC credentials that send key as
// "authorization: Bearer <key>", for kvgate's own tools and tests. Use it with
// grpc.WithPerRPCCredentials.
//
// It does not require transport security: kvgate is often reached over
// plaintext loopback from a sidecar, and refusing that would push operators
// to disable authentication instead. Without TLS the key travels in clear
// text; over any network that is not loopback, use TLS.
func Bearer(key string) credentials.PerRPCCredentials {
	return bearer{header: "Bearer " + key}
}

type bearer struct{ header string }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials; see Bearer.
func (bearer) RequireTransportSecurity() bool { return false }

// String keeps the key out of anything that formats the credentials with %v.
func (bearer) String() string { return "auth.Bearer(<redacted>)" }

// GoString keeps the key out of %#v as well.
func (b bearer) GoString() string { return b.String() }
