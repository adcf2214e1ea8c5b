package workers

// The engines' KV event messages (smg.grpc.common.KvEventBatch) are the same
// for SGLang and vLLM, so one translation serves both adapters. It is also
// where a malformed batch is caught: the mirror of an engine's cache is only
// worth having if every batch applied to it is whole, so a batch that breaks
// the protocol fails the stream (DATA_LOSS, which makes the subscription
// start again from a clean state) instead of being applied in part.

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// Both adapters are event sources.
var (
	_ KVEventSource = (*sglangBackend)(nil)
	_ KVEventSource = (*vllmBackend)(nil)
)

// openKVEvents opens an engine's event stream: method is the protocol's
// SubscribeKvEvents, whose request and response messages both protocols
// share. The stream belongs to ctx: cancelling ctx is how a subscriber
// closes it. Batches are decoded from their bytes (see kvWire), not through
// the generated types.
func openKVEvents(ctx context.Context, conn grpc.ClientConnInterface, method string, start uint64) (KVEventStream, error) {
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodecV2(newKVWireCodec()))
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(&smgcommon.SubscribeKvEventsRequest{StartSequenceNumber: start}); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return &kvEventStream{in: st}, nil
}

// kvEventStream decodes an engine's stream of KvEventBatch messages. Two
// decoders take turns, so a batch lives until the Recv after next, as
// KVEventStream promises its readers (the subscription's receiver applies
// each batch before it receives the next, and needs only one).
type kvEventStream struct {
	in   grpc.ClientStream
	buf  []byte
	dec  [2]kvWire
	turn int
}

// Recv returns the next batch. Errors from the engine or the transport are
// passed through as the gRPC statuses they are (io.EOF for a stream the
// engine closed); a batch that breaks the protocol, or is not a batch at
// all, is a DATA_LOSS error.
func (s *kvEventStream) Recv() (*KVEventBatch, error) {
	if err := s.in.RecvMsg(&s.buf); err != nil {
		return nil, err
	}
	s.turn ^= 1
	return s.dec[s.turn].decode(s.buf)
}

// maxKVRank bounds the data-parallel ranks an engine may name, and so the
// per-rank state a subscription keeps. Real deployments have tens of ranks.
const maxKVRank = 4096

// maxKVTimestamp is the last second time.Time can hold as Unix nanoseconds
// (in 2262); an engine's clock beyond it is a corrupt field, not a date.
const maxKVTimestamp = float64(math.MaxInt64 / int64(time.Second))
