// Package fault holds the errors kvgate's packages return to say what went
// wrong with a request, in terms that do not depend on how the request
// arrived. The gRPC front turns them into a status in one place
// (server.statusOf), and the OpenAI front into an HTTP status through it, so
// no inner package decides a wire code and no two packages agree on one by
// convention.
//
// An error that carries no fault is kvgate's own bug: the edge answers it
// with INTERNAL. Engines' own gRPC statuses, which the adapters relay, and
// context errors keep their meaning at the edge.
package fault

import (
	"errors"
	"fmt"
)

// Kind is what happened, from the client's point of view.
type Kind uint8

const (
	// Bug: kvgate itself went wrong. The zero value, so that an error built
	// without a kind is never mistaken for the client's.
	Bug Kind = iota
	// Invalid: the request is malformed or out of bounds; it would fail on
	// any worker at any time. Field names the request field at fault.
	Invalid
	// TooLarge: the request, or what it asks for, is beyond a limit the
	// router enforces (message size, prompt length, log-probabilities).
	TooLarge
	// Busy: the router or the fleet is at a limit right now (admission
	// queue, rate limit); the same request may succeed later.
	Busy
	// NotFound: the request names a model, worker or request id that the
	// router does not know.
	NotFound
	// Precondition: the request is well formed but cannot be served by the
	// fleet as it is (a constraint no worker supports, a PD request without
	// a decode worker).
	Precondition
	// Unavailable: no worker could serve the request now; a client may
	// retry.
	Unavailable
	// Unsupported: the call, or a feature it asks for, is not implemented
	// by the router or by the engine that would serve it.
	Unsupported
	// Corrupt: an engine's answer broke its protocol (an id outside the
	// vocabulary, a malformed event batch, an unusable embedding).
	Corrupt
	// Unauthenticated: the request carries no valid credentials.
	Unauthenticated
	// Exists: the request would add what is already there (a worker at
	// an address the fleet holds).
	Exists
)

var kindNames = [...]string{
	Bug: "bug", Invalid: "invalid", TooLarge: "too large", Busy: "busy", NotFound: "not found",
	Precondition: "precondition", Unavailable: "unavailable", Unsupported: "unsupported",
	Corrupt: "corrupt", Unauthenticated: "unauthenticated", Exists: "exists",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Error is a fault of one kind. Its message is the whole text the client
// sees; Field, when set, is the request field the message is about. Tests
// hold validation to naming it; no front passes it on yet (statusOf keeps
// only the message; a BadRequest detail, and from it OpenAI's error
// "param", would).
type Error struct {
	Kind  Kind
	Field string
	Msg   string
	// Err is the cause, when the message was formatted with %w.
	Err error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Newf returns a fault of kind k; format and args are fmt.Errorf's, and a %w
// verb makes its operand the cause.
func Newf(k Kind, format string, args ...any) error {
	return build(k, "", format, args)
}

// Fieldf returns a fault of kind k about one request field.
func Fieldf(k Kind, field, format string, args ...any) error {
	return build(k, field, format, args)
}

// Invalidf is Fieldf(Invalid, …): the most common fault, a request field out
// of bounds.
func Invalidf(field, format string, args ...any) error {
	return build(Invalid, field, format, args)
}

func build(k Kind, field, format string, args []any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Kind: k, Field: field, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// As returns the outermost fault in err's chain, if any.
func As(err error) (*Error, bool) {
	var f *Error
	if errors.As(err, &f) {
		return f, true
	}
	return nil, false
}

// KindOf is the kind of the outermost fault in err's chain, and false when
// err carries none.
func KindOf(err error) (Kind, bool) {
	if f, ok := As(err); ok {
		return f.Kind, true
	}
	return Bug, false
}
