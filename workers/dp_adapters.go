package workers

// What each protocol says about data-parallel ranks: how many the engine
// has, each rank's load, and how a request names its rank. The neutral
// side is dprank.go.

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

var (
	_ RankLoader = (*sglangBackend)(nil)
	_ RankLoader = (*vllmBackend)(nil)
	_ DPSizer    = (*sglangBackend)(nil)
	_ DPSizer    = (*vllmBackend)(nil)
)

// sglangGenerateRank is SGLang's data_parallel_rank for a Generate: the
// field is optional there, so no rank (nil) lets the engine choose and rank
// 0 is rank 0, as with vLLM.
func sglangGenerateRank(rank *int) *int32 {
	if rank == nil {
		return nil
	}
	r := int32(*rank)
	return &r
}

// sglangRank is SGLang's data_parallel_rank for an Embed. That field is a
// plain int32 (no presence), so "no rank" and rank 0 are the same bytes on
// the wire: what an engine does with 0 is its own reading (the simulator
// reads it as rank 0 when it has several ranks).
func sglangRank(rank *int) int32 {
	if rank == nil {
		return 0
	}
	return int32(*rank)
}

// DPSize reads server_args.dp_size from GetServerInfo, or, from an engine
// without it, GetLoads' dp_rank_count.
func (b *sglangBackend) DPSize(ctx context.Context) (int, error) {
	si, err := b.c.GetServerInfo(ctx, &sglang.GetServerInfoRequest{})
	if err != nil && status.Code(err) != codes.Unimplemented {
		return 0, err
	}
	if v, ok := si.GetServerArgs().GetFields()["dp_size"]; ok {
		if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 1 {
			return int(n.NumberValue), nil
		}
	}
	resp, err := b.c.GetLoads(ctx, &sglang.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return 0, err
	}
	return max(int(resp.GetDpRankCount()), 1), nil
}

func (b *sglangBackend) RankLoads(ctx context.Context) (map[int]Load, error) {
	resp, err := b.c.GetLoads(ctx, &sglang.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return nil, err
	}
	return loadsByRank(resp.GetLoads())
}

// DPSize reads GetServerInfo's data_parallel_size, or, from an engine
// without it, GetLoads' dp_rank_count.
func (b *vllmBackend) DPSize(ctx context.Context) (int, error) {
	si, err := b.c.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
	if err != nil && status.Code(err) != codes.Unimplemented {
		return 0, err
	}
	if n := int(si.GetDataParallelSize()); n >= 1 {
		return n, nil
	}
	resp, err := b.c.GetLoads(ctx, &vllm.GetLoadsRequest{})
	if err != nil {
		return 0, err
	}
	return max(int(resp.GetDpRankCount()), 1), nil
}

func (b *vllmBackend) RankLoads(ctx context.Context) (map[int]Load, error) {
	resp, err := b.c.GetLoads(ctx, &vllm.GetLoadsRequest{})
	if err != nil {
		return nil, err
	}
	return loadsByRank(resp.GetLoads())
}

// loadsByRank is each rank's report as a Load of its own.
func loadsByRank[L interface {
	rankLoad
	GetDpRank() int32
}](ranks []L) (map[int]Load, error) {
	out := make(map[int]Load, len(ranks))
	for _, r := range ranks {
		rank := int(r.GetDpRank())
		if rank < 0 || rank >= maxDPSize {
			return nil, fmt.Errorf("engine reports the load of dp_rank %d, outside [0, %d)", rank, maxDPSize)
		}
		out[rank] = sumLoads([]L{r})
	}
	return out, nil
}
