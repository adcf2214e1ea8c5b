package sim

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

// dpClient is what the data-parallel tests need of either protocol, with
// the rank a request names (nil: none).
type dpClient interface {
	dpSize(ctx context.Context) (int, error)
	rankLoads(ctx context.Context, only *int32) (count int32, ranks []int32, running []int32, err error)
	generateOn(ctx context.Context, id string, prompt []uint32, rank *int32) error
	subscribe(ctx context.Context) (func() (*smgcommon.KvEventBatch, error), error)
}

type sglangDP struct{ c sglang.SglangSchedulerClient }

func (s sglangDP) dpSize(ctx context.Context) (int, error) {
	si, err := s.c.GetServerInfo(ctx, &sglang.GetServerInfoRequest{})
	return int(si.GetServerArgs().GetFields()["dp_size"].GetNumberValue()), err
}

func (s sglangDP) rankLoads(ctx context.Context, only *int32) (int32, []int32, []int32, error) {
	resp, err := s.c.GetLoads(ctx, &sglang.GetLoadsRequest{DpRank: only})
	var ranks, running []int32
	for _, l := range resp.GetLoads() {
		ranks, running = append(ranks, l.GetDpRank()), append(running, l.GetNumRunningReqs())
	}
	return resp.GetDpRankCount(), ranks, running, err
}

func (s sglangDP) generateOn(ctx context.Context, id string, prompt []uint32, rank *int32) error {
	st, err := s.c.Generate(ctx, &sglang.GenerateRequest{RequestId: id, Tokenized: &sglang.TokenizedInput{InputIds: prompt},
		SamplingParams: &sglang.SamplingParams{Temperature: 1, MaxNewTokens: u32(2)}, DataParallelRank: rank})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

func (s sglangDP) subscribe(ctx context.Context) (func() (*smgcommon.KvEventBatch, error), error) {
	st, err := s.c.SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{})
	if err != nil {
		return nil, err
	}
	return st.Recv, nil
}

type vllmDP struct{ c vllm.VllmEngineClient }

func (v vllmDP) dpSize(ctx context.Context) (int, error) {
	si, err := v.c.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
	return int(si.GetDataParallelSize()), err
}

func (v vllmDP) rankLoads(ctx context.Context, only *int32) (int32, []int32, []int32, error) {
	resp, err := v.c.GetLoads(ctx, &vllm.GetLoadsRequest{DpRank: only})
	var ranks, running []int32
	for _, l := range resp.GetLoads() {
		ranks, running = append(ranks, l.GetDpRank()), append(running, l.GetNumRunningReqs())
	}
	return resp.GetDpRankCount(), ranks, running, err
}

func (v vllmDP) generateOn(ctx context.Context, id string, prompt []uint32, rank *int32) error {
	st, err := v.c.Generate(ctx, &vllm.GenerateRequest{RequestId: id,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt}},
		SamplingParams: &vllm.SamplingParams{MaxTokens: u32(2)}, DataParallelRank: rank})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

func (v vllmDP) subscribe(ctx context.Context) (func() (*smgcommon.KvEventBatch, error), error) {
	st, err := v.c.SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{})
	if err != nil {
		return nil, err
	}
	return st.Recv, nil
}

func TestDataParallelRanks(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			cfg := testConfig(p)
			cfg.DPSize = 4
			srv, _ := startSim(t, cfg)
			conn := testutil.Dial(t, srv.Addr())
			var c dpClient = sglangDP{sglang.NewSglangSchedulerClient(conn)}
			if p == ProtocolVLLM {
				c = vllmDP{vllm.NewVllmEngineClient(conn)}
			}
			ctx := t.Context()
			e := srv.Engine()

			if n, err := c.dpSize(ctx); err != nil || n != 4 {
				t.Fatalf("reported data-parallel size %d, %v; want 4", n, err)
			}
			events, err := c.subscribe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "every rank's subscriber", func() bool { return e.Stats().KVSubscribers == 4 })

			// A request goes to the rank it names; each rank numbers its
			// own KV event batches from 0 and stamps them with its rank.
			for _, rank := range []int32{3, 1} {
				if err := c.generateOn(ctx, fmt.Sprint("pinned-", rank), prompt(100*int(rank+1), 32), proto.Int32(rank)); err != nil {
					t.Fatal(err)
				}
				if st := e.Rank(int(rank)).Stats(); st.Requests != 1 {
					t.Fatalf("rank %d got %d requests", rank, st.Requests)
				}
				b, err := events()
				if err != nil {
					t.Fatal(err)
				}
				if b.DpRank == nil || b.GetDpRank() != rank || b.GetSequenceNumber() != 0 {
					t.Fatalf("batch after a request on rank %d: dp_rank %v, sequence %d", rank, b.DpRank, b.GetSequenceNumber())
				}
			}
			if err := c.generateOn(ctx, "bad-rank", prompt(5, 8), proto.Int32(4)); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("rank 4 of 4: %v, want INVALID_ARGUMENT", err)
			}

			// Loads are per rank; one rank can be asked for alone.
			e.SetFaults(Faults{StallBeforeFirstToken: true})
			hold, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { _ = c.generateOn(hold, "held", prompt(9, 8), proto.Int32(2)) }()
			testutil.Eventually(t, "a request running on rank 2", func() bool { return e.Rank(2).Stats().Running == 1 })
			count, ranks, running, err := c.rankLoads(ctx, nil)
			if err != nil || count != 4 || fmt.Sprint(ranks) != "[0 1 2 3]" || fmt.Sprint(running) != "[0 0 1 0]" {
				t.Fatalf("GetLoads: count %d ranks %v running %v, %v", count, ranks, running, err)
			}
			if _, ranks, running, err := c.rankLoads(ctx, proto.Int32(2)); err != nil || fmt.Sprint(ranks) != "[2]" || fmt.Sprint(running) != "[1]" {
				t.Fatalf("GetLoads of rank 2: ranks %v running %v, %v", ranks, running, err)
			}
			if st := e.Stats(); st.Running != 1 || st.Requests != 3 {
				t.Fatalf("the engine's stats over its ranks: %d running, %d requests", st.Running, st.Requests)
			}
			cancel()
		})
	}
}

// The rank is optional in both protocols' Generate: a request without one
// goes to the rank with the fewest requests, the lowest on a tie.
func TestUnpinnedRequestsGoToTheLeastLoadedRank(t *testing.T) {
	for _, p := range []string{ProtocolSGLang, ProtocolVLLM} {
		t.Run(p, func(t *testing.T) {
			cfg := testConfig(p)
			cfg.DPSize = 3
			cfg.Faults.StallBeforeFirstToken = true
			srv, _ := startSim(t, cfg)
			var c interface {
				generateOn(ctx context.Context, id string, prompt []uint32, rank *int32) error
			} = vllmDP{vllm.NewVllmEngineClient(testutil.Dial(t, srv.Addr()))}
			if p == ProtocolSGLang {
				c = sglangDP{sglang.NewSglangSchedulerClient(testutil.Dial(t, srv.Addr()))}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			e := srv.Engine()
			for i := range 3 {
				go func() { _ = c.generateOn(ctx, fmt.Sprint("free-", i), prompt(10+i, 8), nil) }()
				testutil.Eventually(t, fmt.Sprintf("request %d placed", i), func() bool { return e.Stats().Running == i+1 })
			}
			for r := range 3 {
				if n := e.Rank(r).Stats().Running; n != 1 {
					t.Errorf("rank %d runs %d requests, want 1 each", r, n)
				}
			}
		})
	}
}

func TestDPSizeValidation(t *testing.T) {
	for _, tc := range []struct {
		size int
		role string
		ok   bool
	}{
		{0, RoleRegular, true}, {1, RolePrefill, true}, {8, RoleRegular, true},
		{-1, RoleRegular, false}, {maxDPSize + 1, RoleRegular, false}, {2, RoleDecode, false},
	} {
		cfg := testConfig(ProtocolSGLang)
		cfg.DPSize, cfg.Role = tc.size, tc.role
		e, err := New(cfg)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("DPSize %d role %s: %v", tc.size, tc.role, err)
		}
		if e != nil {
			e.Close()
		}
	}
}
