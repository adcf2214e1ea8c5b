package server_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// readmeGo is README's Go snippet ("Calling kvgate"), with its address and
// output as parameters; TestREADMEGoSnippet runs it against a fleet.
func readmeGo(ctx context.Context, addr string, out io.Writer, req *kvgatev1.ChatRequest) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	router, admin := kvgatev1.NewRouterClient(conn), kvgatev1.NewAdminClient(conn)

	kwargs, _ := structpb.NewStruct(map[string]any{"enable_thinking": false})
	if req == nil {
		req = &kvgatev1.ChatRequest{
			Messages:           []*kvgatev1.ChatMessage{{Role: "user", Content: "What is a KV cache?"}},
			ChatTemplateKwargs: kwargs,
			SamplingParams:     &kvgatev1.SamplingParams{MaxNewTokens: proto.Uint32(16)},
			Stream:             true,
		}
	}
	stream, err := router.Chat(ctx, req)
	if err != nil {
		return err
	}
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if status.Code(err) == codes.InvalidArgument {
			return fmt.Errorf("refused: %s", status.Convert(err).Message())
		}
		if err != nil {
			return err
		}
		if c := res.GetComplete(); c != nil {
			fmt.Fprintf(out, "%q on %s, %d cached tokens\n", c.GetText(), c.GetWorker(), c.GetUsage().GetCachedTokens())
		}
	}
	ex, err := admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{
		Generate: &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}}})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, ex.GetWorker(), ex.GetBranch(), ex.GetReason())
	return nil
}

func TestREADMEGoSnippet(t *testing.T) {
	f := startFleet(t, fleetOptions{text: true, policy: "cache_aware"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	if err := readmeGo(ctx, f.conn.Target(), &out, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "cached tokens") || !strings.HasPrefix(lines[1], "grpc://") {
		t.Fatalf("output %q, want the completion's line and the explanation's", out.String())
	}
	bad := &kvgatev1.ChatRequest{}
	if err := readmeGo(ctx, f.conn.Target(), &out, bad); err == nil || !strings.Contains(err.Error(), "refused: messages is empty") {
		t.Fatalf("an empty Chat: %v, want the snippet's refusal naming messages", err)
	}
}
