package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// accessLog writes each Router and Admin call's "finished call" line, with
// the fields and levels of go-grpc-middleware's logging interceptor, which
// wrote it before (the level by its DefaultServerCodeToLevel). That
// interceptor built the line's fields for every call, at its start and its
// end, whether or not the logger then wrote it: with the log at WARN, about
// 5% of the router's CPU for a 1K-token Generate went on lines that were
// thrown away (BENCHMARKS "The access log built only when written"). Here
// the level is known from the code when the call ends, and the fields are
// built only if the logger takes it.
type accessLog struct {
	log *slog.Logger
}

// unary logs a unary call when it ends.
func (a accessLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !monitored(info.FullMethod) {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	a.finished(ctx, info.FullMethod, "unary", start, err)
	return resp, err
}

// stream logs a streaming call when it ends.
func (a accessLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !monitored(info.FullMethod) {
		return handler(srv, ss)
	}
	start := time.Now()
	err := handler(srv, ss)
	a.finished(ss.Context(), info.FullMethod, streamType(info), start, err)
	return err
}

// streamType names a stream as the middleware's grpc.method_type field did.
func streamType(info *grpc.StreamServerInfo) string {
	switch {
	case info.IsClientStream && info.IsServerStream:
		return "bidi_stream"
	case info.IsClientStream:
		return "client_stream"
	default:
		return "server_stream"
	}
}

// finished writes the line of a call to fullMethod of methodType that
// started at start and ended with err, if the logger is enabled at the
// level of err's code. methodType is "" for a call refused before any
// interceptor ran, whose line has no type, start or duration.
func (a accessLog) finished(ctx context.Context, fullMethod, methodType string, start time.Time, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	code := status.Code(err)
	lvl := slog.Level(logging.DefaultServerCodeToLevel(code))
	if !a.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, 28)
	attrs = append(attrs, labelFields(ctx)...)
	service, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	attrs = append(attrs, "protocol", "grpc", "grpc.component", "server", "grpc.service", service, "grpc.method", method)
	if methodType != "" {
		attrs = append(attrs, "grpc.method_type", methodType)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, "peer.address", p.Addr.String())
	}
	if methodType != "" {
		attrs = append(attrs, "grpc.start_time", start.Format(time.RFC3339))
		if d, ok := ctx.Deadline(); ok {
			attrs = append(attrs, "grpc.request.deadline", d.Format(time.RFC3339))
		}
	}
	attrs = append(attrs, "grpc.code", code.String())
	if err != nil {
		attrs = append(attrs, "grpc.error", err.Error())
	}
	if methodType != "" {
		attrs = append(attrs, "grpc.time_ms", millis(time.Since(start)))
	}
	a.log.Log(ctx, lvl, "finished call", attrs...)
}

// millis is d in milliseconds to the microsecond, as a string: the
// middleware's grpc.time_ms, which log pipelines may already parse.
func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(float32(d.Microseconds())/1000), 'f', -1, 32)
}
