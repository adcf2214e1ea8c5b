package workers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestLacks: UNIMPLEMENTED shows any RPC missing, an unusable embedding
// shows Embed missing; an engine failing (UNAVAILABLE, a broken stream's
// DATA_LOSS) or refusing a request says nothing about what it implements.
func TestLacks(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"UNIMPLEMENTED", status.Error(codes.Unimplemented, "unknown method Embed"), true},
		{"UNIMPLEMENTED, wrapped", fmt.Errorf("worker x: %w", status.Error(codes.Unimplemented, "no")), true},
		{"an empty embedding", badEmbedding("sglang engine returned an empty embedding"), true},
		{"an unusable embedding, wrapped", fmt.Errorf("%w: %w", ErrBadEmbedding, status.Error(codes.DataLoss, "mixed dimensions")), true},
		{"UNAVAILABLE", status.Error(codes.Unavailable, "connection refused"), false},
		{"a corrupt stream", status.Error(codes.DataLoss, "engine output is corrupt"), false},
		{"INVALID_ARGUMENT", status.Error(codes.InvalidArgument, "input too long"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lacks(RPCEmbed, tc.err); got != tc.want {
				t.Errorf("Lacks(Embed, %v) = %v; want %v", tc.err, got, tc.want)
			}
		})
	}
	if !testutil.IsFault(badEmbedding("x"), fault.Corrupt) {
		t.Errorf("an unusable embedding is %v; want DATA_LOSS", status.Code(badEmbedding("x")))
	}
}

// TestMarkLacking: a worker marked lacking an RPC is left out of it until
// LackingRecheck has passed, is counted once per period, names the answer
// that showed it, and keeps every other RPC and its breaker.
func TestMarkLacking(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	w := NewWorker("grpc://w:1", ProtocolSGLang, RoleRegular, ModelInfo{}, nil, nil)
	w.caps.now = func() time.Time { return now }
	if !w.Implements(RPCEmbed) || w.Lacking() != nil {
		t.Fatal("a new worker lacks Embed")
	}
	err := status.Error(codes.Unimplemented, "serves no embeddings")
	if !w.MarkLacking(RPCEmbed, err) {
		t.Fatal("the first mark reports the worker as already marked")
	}
	if w.MarkLacking(RPCEmbed, err) {
		t.Error("a second mark in the same period reports a new one")
	}
	if w.Implements(RPCEmbed) {
		t.Error("a marked worker implements Embed")
	}
	if got := w.Lacking(); len(got) != 1 || !strings.Contains(got[0], "Embed: serves no embeddings") {
		t.Errorf("Lacking() = %q", got)
	}
	if w.Breaker().State() != BreakerClosed || !w.Available() {
		t.Error("marking an RPC touched the worker's availability for Generate")
	}
	now = now.Add(LackingRecheck - time.Nanosecond)
	if w.Implements(RPCEmbed) {
		t.Error("the mark expired before LackingRecheck")
	}
	now = now.Add(time.Nanosecond)
	if !w.Implements(RPCEmbed) || w.Lacking() != nil {
		t.Error("the mark outlived LackingRecheck")
	}
	if !w.MarkLacking(RPCEmbed, err) {
		t.Error("a mark after the recheck is not reported as new")
	}
}
