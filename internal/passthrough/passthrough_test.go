package passthrough_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/internal/passthrough"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// fleet is two identical simulated SGLang engines, a client of one and a
// relay in front of the other: the same calls must get the same answers.
type fleet struct {
	direct, relayed sglang.SglangSchedulerClient
	relayAddr       string
}

func engine(t *testing.T) *sim.Process {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.TokenizerDir = ""
	cfg.VocabSize = 1000
	cfg.EOSTokenID = 999
	eng, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Stop)
	return eng
}

func start(t *testing.T) fleet {
	t.Helper()
	srv := passthrough.New(testutil.Dial(t, engine(t).Addr()))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return fleet{
		direct:    sglang.NewSglangSchedulerClient(testutil.Dial(t, engine(t).Addr())),
		relayed:   sglang.NewSglangSchedulerClient(testutil.Dial(t, lis.Addr().String())),
		relayAddr: lis.Addr().String(),
	}
}

func request(id string, ids []uint32, maxNew uint32) *sglang.GenerateRequest {
	return &sglang.GenerateRequest{
		RequestId: id,
		Tokenized: &sglang.TokenizedInput{InputIds: ids},
		SamplingParams: &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1,
			MaxNewTokens: &maxNew, N: 1},
		Stream: true,
	}
}

// collect reads a whole stream: its messages and the status it ended with.
func collect(ctx context.Context, c sglang.SglangSchedulerClient, req *sglang.GenerateRequest) ([]*sglang.GenerateResponse, error) {
	st, err := c.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []*sglang.GenerateResponse
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestRelayIsTransparent(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	ids := make([]uint32, 300)
	for i := range ids {
		ids[i] = uint32(i*37) % 900
	}
	tests := []struct {
		name string
		req  *sglang.GenerateRequest
	}{
		{"a streamed generation", request("a", ids, 8)},
		{"one token", request("b", ids[:5], 1)},
		// The engine refuses an id outside its vocabulary; the relay must
		// bring back the engine's status, code and message, not one of its own.
		{"an engine error", request("c", []uint32{5000}, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := collect(ctx, f.direct, tt.req)
			got, gotErr := collect(ctx, f.relayed, tt.req)
			if status.Code(gotErr) != status.Code(wantErr) || status.Convert(gotErr).Message() != status.Convert(wantErr).Message() {
				t.Fatalf("relayed status %v, direct %v", gotErr, wantErr)
			}
			if len(got) != len(want) {
				t.Fatalf("relayed %d messages, direct %d", len(got), len(want))
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("message %d: relayed %v, direct %v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestRelayUnknownMethodIsTheUpstreamsAnswer(t *testing.T) {
	f := start(t)
	// A method the upstream does not serve comes back UNIMPLEMENTED from it.
	err := testutil.Dial(t, f.relayAddr).Invoke(context.Background(), "/no.such.Service/Call", &sglang.GenerateRequest{}, &sglang.GenerateResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("got %v, want UNIMPLEMENTED", err)
	}
}

func TestRelayCancelLeavesNoGoroutines(t *testing.T) {
	f := start(t)
	ids := make([]uint32, 64)
	// A first call opens the connections, whose goroutines stay.
	if _, err := collect(context.Background(), f.relayed, request("warm", ids, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.NoLeaks(t) // checked when the test ends, before the servers stop
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := f.relayed.Generate(ctx, request(fmt.Sprint("x", i), ids, 10_000))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := collect(ctx, f.relayed, request("y", ids, 1)); status.Code(err) != codes.Canceled {
			t.Fatalf("a call on a cancelled context: %v, want CANCELED", err)
		}
	}
}
