package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// apiError is an error in OpenAI's shape, with the HTTP status it is sent
// with. Errors of the client's request are made here (bad JSON, a field of
// the wrong type, an unsupported parameter); the router's own answers come
// as gRPC status and are mapped by fromStatus, once, for every endpoint.
type apiError struct {
	status  int
	message string
	kind    string // OpenAI's "type"
	param   string // the offending field, when known
	code    string
}

func (e *apiError) Error() string { return e.message }

// errorBody is OpenAI's error JSON: {"error": {...}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.message, Type: e.kind}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return errorBody{Error: d}
}

// invalidParam is a 400 naming the field.
func invalidParam(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), kind: "invalid_request_error", param: param, code: "invalid_argument"}
}

// httpStatus maps a gRPC code to the HTTP status OpenAI's clients act on:
// their SDKs retry 429 and 5xx, so only the router's retryable answers
// (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) get those, and a
// client's mistake is always 4xx. FAILED_PRECONDITION (a request the
// router cannot serve as configured, such as chat without a tokenizer) is
// 400, as OpenAI answers requests it cannot serve, not 422.
func httpStatus(c codes.Code) (int, string) {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return http.StatusBadRequest, "invalid_request_error"
	case codes.Unauthenticated:
		return http.StatusUnauthorized, "authentication_error"
	case codes.PermissionDenied:
		return http.StatusForbidden, "permission_error"
	case codes.NotFound:
		return http.StatusNotFound, "not_found_error"
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict, "invalid_request_error"
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, "rate_limit_error"
	case codes.Unimplemented:
		return http.StatusNotImplemented, "invalid_request_error"
	case codes.Unavailable:
		return http.StatusServiceUnavailable, "server_error"
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, "timeout_error"
	case codes.Canceled:
		return 499, "invalid_request_error" // the client went away; nobody reads it
	default:
		return http.StatusInternalServerError, "server_error"
	}
}

// fromStatus turns an error of a gRPC call into OpenAI's shape. The
// router's message already names the field and its limit; it is kept.
func fromStatus(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var tm errTooManyClients
	if errors.As(err, &tm) {
		return &apiError{status: http.StatusTooManyRequests, message: tm.Error(), kind: "rate_limit_error", code: "resource_exhausted"}
	}
	st := status.Convert(err)
	code, kind := httpStatus(st.Code())
	return &apiError{status: code, message: st.Message(), kind: kind, code: strings.ToLower(st.Code().String())}
}

// writeError sends err as OpenAI's error JSON with its HTTP status.
func writeError(w http.ResponseWriter, err error) {
	ae := fromStatus(err)
	writeJSON(w, ae.status, ae.body())
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody reads the request's JSON into v. The body is limited to max
// bytes before it is read (http.MaxBytesReader), so a larger one is
// refused with 413 without being read whole. It must arrive within
// `within` (the connection's read deadline, cleared once it is in), so
// that a client sending its headers and then its body a byte at a time
// holds nothing for long: 408. Unknown fields are ignored, as OpenAI's servers do; a field of the
// wrong type is a 400 naming it.
//
// JSON text is UTF-8 (RFC 8259), and a body that is not is a 400 too.
// encoding/json would let invalid bytes through: it replaces them in the
// strings it decodes, but keeps them in a json.RawMessage, which the
// front passes on as JSON text (a response_format's schema); a protobuf
// string must be UTF-8, so the router's call then failed as its own
// error, a 500 (FuzzOpenAIRequest found it).
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, within time.Duration, v any) error {
	rc := http.NewResponseController(w)
	deadline := within > 0 && rc.SetReadDeadline(time.Now().Add(within)) == nil
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		// The deadline stays: the server would otherwise wait for the
		// rest of the body, to keep the connection, before it answers.
		w.Header().Set("Connection", "close")
		return &apiError{status: http.StatusRequestTimeout, kind: "invalid_request_error", code: "request_timeout",
			message: fmt.Sprintf("the request body did not arrive within %v of its headers (--request-read-timeout)", within)}
	}
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return jsonError(err, max)
	}
	if at := invalidUTF8(raw); at >= 0 {
		return invalidParam("", "the request body is not valid UTF-8 (at byte %d): JSON text must be UTF-8", at)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return jsonError(err, max)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidParam("", "the request body holds more than one JSON value")
	}
	return nil
}

// invalidUTF8 returns the offset of b's first byte that is not part of a
// valid UTF-8 encoding, or -1 when b is valid UTF-8.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// jsonError explains a decoding error in the request's terms.
func jsonError(err error, max int64) *apiError {
	var (
		mb *http.MaxBytesError
		te *json.UnmarshalTypeError
		se *json.SyntaxError
		fe *fieldError
	)
	switch {
	case errors.As(err, &mb):
		return &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-request-bytes)", max),
			kind: "invalid_request_error", code: "request_too_large"}
	case errors.As(err, &fe):
		return invalidParam(fe.field, "%s: %s", fe.field, fe.msg)
	case errors.As(err, &te):
		// Fields of an embedded struct are named with its Go name first.
		field := strings.TrimPrefix(te.Field, "sampling.")
		if field == "" {
			return invalidParam("", "the request body must be a JSON object, not %s", te.Value)
		}
		return invalidParam(field, "%s must be %s, not %s", field, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return invalidParam("", "the request body is not valid JSON (at byte %d): %v", se.Offset, err)
	case errors.Is(err, io.EOF):
		return invalidParam("", "the request body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidParam("", "the request body is not valid JSON: it ends early")
	default:
		return invalidParam("", "the request body is not valid JSON: %v", err)
	}
}

// jsonKind names a Go kind as JSON calls it.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "uint"):
		return "an integer ≥ 0 (in range)"
	case strings.HasPrefix(k, "int"):
		return "an integer (in range)"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "bool":
		return "a boolean"
	case k == "string":
		return "a string"
	case k == "slice", k == "array":
		return "an array"
	case k == "ptr":
		return "a value of another type"
	default:
		return "an object"
	}
}

// fieldError is a wrong value found by a field's own UnmarshalJSON, which
// knows its shape but not its name: the parent fills field in.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }
