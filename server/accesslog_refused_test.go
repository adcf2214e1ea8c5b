package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A call the authenticator refused never reached the interceptors: its line
// names the method, the peer, the code and the error, and no start, type or
// duration, which it never had.
func TestRefusedCallLine(t *testing.T) {
	var buf bytes.Buffer
	a := accessLog{slog.New(slog.NewJSONHandler(&buf, nil))}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 4242}})
	err := status.Error(codes.Unauthenticated, "missing bearer token")
	a.finished(ctx, "/kvgate.v1.Admin/ListWorkers", "", time.Time{}, err)

	var line map[string]any
	if e := json.Unmarshal(buf.Bytes(), &line); e != nil {
		t.Fatalf("%q: %v", buf.String(), e)
	}
	want := map[string]any{"msg": "finished call", "level": "INFO", "protocol": "grpc", "grpc.component": "server",
		"grpc.service": "kvgate.v1.Admin", "grpc.method": "ListWorkers", "peer.address": "10.0.0.7:4242",
		"grpc.code": "Unauthenticated", "grpc.error": err.Error()}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	for _, k := range []string{"grpc.method_type", "grpc.start_time", "grpc.time_ms", "grpc.request.deadline"} {
		if _, has := line[k]; has {
			t.Errorf("refused call's line has %s: %v", k, line)
		}
	}
}
