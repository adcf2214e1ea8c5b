package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// `kvgate serve --kv-events-zmq` in front of two simulated vLLM engines
// publishing over ZMQ (as `kvgate sim --kv-events-zmq` does): each worker's
// cache is mirrored from its publisher, not from SubscribeKvEvents, and
// ListWorkers shows the stream.
func TestServeFollowsKVEventsOverZMQ(t *testing.T) {
	var urls, zmqFlags []string
	var sims []*sim.Process
	var pubs []*sim.ZMQPublisher
	for i := range 2 {
		c := sim.DefaultConfig()
		c.Protocol, c.TimeScale, c.Seed = sim.ProtocolVLLM, 0, int64(i)
		c.Logger = slog.New(slog.DiscardHandler)
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		p, err := sim.StartZMQPublisher(s, sim.ZMQConfig{Endpoint: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		url := "grpc://" + s.Addr()
		urls = append(urls, url)
		zmqFlags = append(zmqFlags, "--kv-events-zmq", fmt.Sprintf("%s=%s?replay=%s", url, p.Endpoint(), p.ReplayEndpoint()))
		sims, pubs = append(sims, s), append(pubs, p)
	}
	l := startServe(t, append([]string{"--worker-urls", urls[0], urls[1], "--policy", "cache_aware"}, zmqFlags...)...)
	conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	router, admin := kvgatev1.NewRouterClient(conn), kvgatev1.NewAdminClient(conn)

	// Requests until every worker has applied batches over ZMQ: a PUB
	// socket sends nothing until the subscription has reached it.
	i := 0
	testutil.EventuallyState(t, testutil.Patience, "KV events over ZMQ flowing for every worker", func() (bool, string) {
		i++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := router.Generate(ctx, &kvgatev1.GenerateRequest{
			InputIds: []uint32{uint32(100 + i), 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(2)}})
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = st.Recv()
		}
		ws, lerr := admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		cancel()
		if lerr != nil {
			t.Fatal(lerr)
		}
		flowing := 0
		for _, w := range ws.GetWorkers() {
			if ev := w.GetKvEvents(); ev.GetMode() == "events" && ev.GetBatches() > 0 && ev.GetConnected() {
				flowing++
			}
		}
		return flowing == len(urls), fmt.Sprintf("after %d requests: %v", i, ws.GetWorkers())
	})
	for i, s := range sims {
		// The engine's only event subscriber is its ZMQ publisher: the
		// router did not open SubscribeKvEvents.
		if n := s.Engine().Stats().KVSubscribers; n != 1 {
			t.Errorf("engine %d has %d KV event subscribers, want 1 (its publisher)", i, n)
		}
		if n, _ := pubs[i].Published(); n == 0 {
			t.Errorf("publisher %d published nothing", i)
		}
	}
}
