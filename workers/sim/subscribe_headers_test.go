package sim

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// TestSubscribeAnswersAtOnce: the engines' servicers send a subscription's
// headers as soon as they are subscribed to their publishers, before any
// batch exists. A subscriber may take the headers as the sign that the
// stream is open (SMG drops a subscription with no answer in 2 s), so an idle
// engine must answer a subscription without waiting for its first batch.
func TestSubscribeAnswersAtOnce(t *testing.T) {
	open := map[string]func(conn *grpc.ClientConn, ctx context.Context) (func() (metadata.MD, error), error){
		ProtocolSGLang: func(conn *grpc.ClientConn, ctx context.Context) (func() (metadata.MD, error), error) {
			st, err := sglang.NewSglangSchedulerClient(conn).SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{})
			if err != nil {
				return nil, err
			}
			return st.Header, nil
		},
		ProtocolVLLM: func(conn *grpc.ClientConn, ctx context.Context) (func() (metadata.MD, error), error) {
			st, err := vllm.NewVllmEngineClient(conn).SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{})
			if err != nil {
				return nil, err
			}
			return st.Header, nil
		},
	}
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			srv, err := Start(testConfig(p), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The deadline only bounds a defective engine, which never
			// answers; a correct one answers at once.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			header, err := open[p](conn, ctx)
			if err != nil {
				t.Fatalf("SubscribeKvEvents: %v", err)
			}
			// Header answers without an error when the stream ends without
			// headers too: here, at the deadline.
			if md, err := header(); err != nil || ctx.Err() != nil {
				t.Fatalf("no headers from an idle engine's subscription (header %v, error %v, context %v)", md, err, ctx.Err())
			}
		})
	}
}
