// Package auth authenticates callers of kvgate's gRPC services with API keys
// sent as "authorization: Bearer <key>" metadata.
//
// kvgate has two kinds of callers: clients that generate (the kvgate.v1.Router
// service) and operators who inspect and change the fleet (kvgate.v1.Admin).
// Config holds one key for each, and the policy for the cases where a key is
// left empty is:
//
//   - No key set for a service: that service is open. A router on a loopback
//     sidecar or behind a mesh that authenticates for it needs no key.
//   - APIKey set, AdminAPIKey empty: Admin requires the APIKey. An operator who
//     asked for authentication never gets an open Admin service by omission.
//   - AdminAPIKey set: only the AdminAPIKey opens Admin; the Router key does
//     not, so a leaked client key cannot drain workers.
//   - The standard health service (grpc.health.v1.Health) and server
//     reflection (grpc.reflection.v1 and v1alpha ServerReflection) are always
//     open: load balancers and orchestrators probe health without secrets, and
//     reflection only describes the API, which is public.
//   - Any other service requires the APIKey when one is set, so a service
//     added later is closed by default rather than open.
//
// The check runs in grpc-go's transport (Tap), as soon as a call's headers
// have arrived: a refused call is answered before any byte of its request
// message is read, so a caller without a key costs the router a header
// parse, never the decoding of a message of the maximum size.
//
// Keys are compared in constant time on their SHA-256 digests, so neither the
// key's content nor its length leaks through timing. Refusals carry
// codes.Unauthenticated and say what is expected; they never repeat the key
// that was presented, and nothing here logs a key.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// Config selects the keys. The zero Config leaves every service open.
type Config struct {
	// APIKey is required for kvgate.v1.Router and for any service not named
	// in the package documentation. Empty leaves them open.
	APIKey string
	// AdminAPIKey is required for kvgate.v1.Admin. Empty means Admin requires
	// APIKey instead (and is open only when APIKey is empty too).
	AdminAPIKey string
	// Logger receives one debug record per refused call (method, peer and
	// reason, never the key). Nil discards them.
	Logger *slog.Logger
}

// key is the digest of a configured key; set is false when none is configured.
type key struct {
	digest [sha256.Size]byte
	set    bool
}

func newKey(s string) key {
	if s == "" {
		return key{}
	}
	return key{digest: sha256.Sum256([]byte(s)), set: true}
}

// matches reports whether presented is this key. Both sides are digests of
// equal length, so the comparison time depends on neither key's length.
func (k key) matches(presented string) bool {
	d := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(k.digest[:], d[:]) == 1
}

// Authenticator checks each call against the policy of its Config. It is
// immutable and safe for concurrent use.
type Authenticator struct {
	router key // also the key for any other non-exempt service
	admin  key // the key Admin requires; may be the router key
	open   map[string]bool
	logger *slog.Logger
}

// New returns an Authenticator for cfg.
func New(cfg Config) *Authenticator {
	a := &Authenticator{
		router: newKey(cfg.APIKey),
		admin:  newKey(cfg.AdminAPIKey),
		open: map[string]bool{
			healthpb.Health_ServiceDesc.ServiceName:                    true,
			reflectionv1.ServerReflection_ServiceDesc.ServiceName:      true,
			reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: true,
		},
		logger: cfg.Logger,
	}
	if !a.admin.set {
		a.admin = a.router
	}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	return a
}

// Refused is told of each call the Authenticator refuses, with the call's
// method and the status it is answered with; the server counts and logs
// refusals through it, since a refused call never reaches the interceptors
// that do so for the others.
type Refused func(ctx context.Context, fullMethod string, err error)

// Tap returns the transport-level check for grpc.InTapHandle. grpc-go runs it
// once a call's headers have arrived and before the call exists: a refused
// call is answered with its status at once, and no byte of its request
// message is read, buffered or decoded. Interceptors run too late for that:
// grpc-go reads and decodes a unary request whole before the first unary
// interceptor, so a client without a key could make the router decode a
// message of the maximum size on every call.
//
// refused, when not nil, is called for each refusal. The tap runs on the
// connection's reader goroutine, so refused must return promptly.
func (a *Authenticator) Tap(refused Refused) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		err := a.Authorize(ctx, info.FullMethodName)
		if err != nil && refused != nil {
			refused(ctx, info.FullMethodName, err)
		}
		return ctx, err
	}
}

// Authorize returns nil when the incoming metadata of ctx allows a call to
// fullMethod ("/package.Service/Method"), and a codes.Unauthenticated status
// otherwise. Tap uses it; it is exported for servers that route calls
// without grpc-go's transport (a relay, an HTTP front).
func (a *Authenticator) Authorize(ctx context.Context, fullMethod string) error {
	service, wellFormed := serviceOf(fullMethod)
	k := a.router
	if wellFormed {
		k = a.keyFor(service)
	}
	if !k.set {
		return nil
	}
	presented, err := bearerToken(ctx)
	if err == nil && !k.matches(presented) {
		err = status.Errorf(codes.Unauthenticated, "invalid API key for %s", service)
	}
	if err != nil {
		a.refused(ctx, fullMethod, err)
	}
	return err
}

// keyFor returns the key that service requires (unset when it is open).
func (a *Authenticator) keyFor(service string) key {
	switch {
	case a.open[service]:
		return key{}
	case service == kvgatev1.Admin_ServiceDesc.ServiceName:
		return a.admin
	default:
		return a.router
	}
}

func (a *Authenticator) refused(ctx context.Context, fullMethod string, err error) {
	if !a.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	// The status message never contains the presented key, so it is safe to log.
	a.logger.DebugContext(ctx, "auth: call refused",
		"method", fullMethod, "peer", addr, "reason", status.Convert(err).Message())
}

// serviceOf returns "package.Service" from "/package.Service/Method". A
// malformed name is returned whole with ok false: it matches no exemption and
// is treated as an unknown service, which requires the Router key.
func serviceOf(fullMethod string) (service string, ok bool) {
	s, ok := strings.CutPrefix(fullMethod, "/")
	i := strings.LastIndexByte(s, '/')
	if !ok || i <= 0 {
		return fullMethod, false
	}
	return s[:i], true
}

const expected = "send 'authorization: Bearer <key>'"

// bearerToken extracts the key from the one authorization metadata value.
// Several values are refused rather than tried in turn, which would let one
// call test many guesses.
func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch len(vals) {
	case 0:
		return "", status.Error(codes.Unauthenticated, "missing authorization metadata: "+expected)
	case 1:
	default:
		return "", status.Error(codes.Unauthenticated, "more than one authorization metadata value: "+expected+" once")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", status.Error(codes.Unauthenticated, "malformed authorization metadata: "+expected)
	}
	return token, nil
}
