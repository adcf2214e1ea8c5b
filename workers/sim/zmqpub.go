package sim

// ZMQPublisher publishes a served engine's KV events over ZMQ the way vLLM's
// ZmqEventPublisher does, so that a router's ZMQ event source is tested
// against real sockets: a PUB socket sending (topic, 8-byte big-endian
// sequence number, msgpack batch), and a ROUTER replay socket answering
// (empty, 8-byte start) with the kept batches numbered start and later,
// each as (empty, number, batch), then (empty, -1, empty). The batches are
// the ones the engine streams over SubscribeKvEvents, in vLLM's msgpack
// shape (see ZMQShape), numbered by the publisher from 0 as vLLM numbers
// them. When the engine is killed the sockets close with it; when it is
// restarted they open again on the same ports, numbering from 0 with an
// empty replay buffer, as a restarted vLLM process does.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tinylib/msgp/msgp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// ZMQShape is how the publisher writes its batches; vLLM releases differ.
type ZMQShape string

const (
	// ZMQShapeMap: the batch and its events are msgpack maps, each event
	// tagged by a "type" key; block hashes are 32-byte digests. Current vLLM.
	ZMQShapeMap ZMQShape = "map"
	// ZMQShapeArray: the batch and its events are arrays, each event's first
	// element its tag; block hashes are integers. Earlier vLLM releases
	// (array_like structs, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES).
	ZMQShapeArray ZMQShape = "array"
)

// ZMQConfig configures a ZMQPublisher.
type ZMQConfig struct {
	// Endpoint is the PUB socket's address, tcp://host:port (port 0: any).
	Endpoint string
	// Connect makes the PUB socket connect to Endpoint, where the
	// subscriber binds, instead of binding it (vLLM connects when its
	// endpoint names no wildcard). It reconnects when the subscriber
	// comes back.
	Connect bool
	// Replay is the ROUTER replay socket's address; empty: none.
	Replay string
	// Topic is the first frame of every message.
	Topic string
	// Shape is the msgpack shape of the batches; empty means ZMQShapeMap.
	Shape ZMQShape
	// Buffer is how many batches are kept for replay; 0 means 10,000 (as
	// vLLM's buffer_steps).
	Buffer int
	// SkipEvery is a fault: every n-th batch (the n-th, 2n-th, ...) is kept
	// for replay but not sent on the PUB socket, as a PUB socket drops what
	// a slow subscriber cannot take. 0: none.
	SkipEvery int
}

// ZMQFault is a hostile payload CorruptNext puts in place of a batch.
type ZMQFault int

const (
	// ZMQGarbage: bytes that are not msgpack.
	ZMQGarbage ZMQFault = iota + 1
	// ZMQHuge: a 64 MiB frame, above any subscriber's sensible bound.
	ZMQHuge
)

// ZMQPublisher is a running publisher; Close stops it.
type ZMQPublisher struct {
	cfg    ZMQConfig
	srv    *Process
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu             sync.Mutex
	endpoint       string // with the port bound first, for restarts
	replayEndpoint string
	published      uint64 // batches published since the last (re)start
	changed        chan struct{}
	corrupt        ZMQFault // for the next batch; 0: none
	unsent         int      // batches still to keep but not send (DropNext)
	failReplay     bool     // answer the next replay request wrongly
}

// DropNext keeps the next n batches for replay without sending them on the
// PUB socket, as a PUB socket drops what it sends before a subscriber's
// subscription has reached it: a hole at a moment the test chooses (the
// first batches of a restarted publisher, say).
func (p *ZMQPublisher) DropNext(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsent = n
}

// FailNextReplay answers the next replay request with a message that is not
// (sequence, batch), then serves the following ones as usual: a replay
// that fails once.
func (p *ZMQPublisher) FailNextReplay() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failReplay = true
}

// CorruptNext sends (and keeps for replay) the next batch as f instead,
// under its sequence number: a hostile publisher at a moment the test
// chooses.
func (p *ZMQPublisher) CorruptNext(f ZMQFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.corrupt = f
}

// StartZMQPublisher publishes s's engine's KV events (the engine must have
// KV events on) until Close.
func StartZMQPublisher(s *Process, cfg ZMQConfig, log *slog.Logger) (*ZMQPublisher, error) {
	if cfg.Shape == "" {
		cfg.Shape = ZMQShapeMap
	}
	if cfg.Shape != ZMQShapeMap && cfg.Shape != ZMQShapeArray {
		return nil, fmt.Errorf("sim: ZMQ shape %q is neither map nor array", cfg.Shape)
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 10_000
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &ZMQPublisher{cfg: cfg, srv: s, log: log, cancel: cancel, done: make(chan struct{}),
		endpoint: cfg.Endpoint, replayEndpoint: cfg.Replay, changed: make(chan struct{})}
	e := s.Engine()
	switch {
	case !e.cfg.KVEvents:
		cancel()
		return nil, fmt.Errorf("sim: a ZMQ publisher needs KV events on")
	case e.ranks != nil:
		cancel()
		return nil, fmt.Errorf("sim: a ZMQ publisher serves one data-parallel rank; vLLM starts one per rank, on ports offset by the rank")
	}
	socks, err := p.open(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	registered := make(chan struct{})
	go func() {
		defer close(p.done)
		p.run(ctx, e, socks, registered)
	}()
	select {
	case <-registered:
	case <-p.done:
	}
	return p, nil
}

// Endpoint and ReplayEndpoint are the sockets' addresses, their ports
// resolved.
func (p *ZMQPublisher) Endpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endpoint
}

func (p *ZMQPublisher) ReplayEndpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replayEndpoint
}

// Published is how many batches the publisher has numbered since it last
// started, and a channel closed when that changes.
func (p *ZMQPublisher) Published() (uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published, p.changed
}

// Close stops the publisher and closes its sockets.
func (p *ZMQPublisher) Close() {
	p.cancel()
	<-p.done
}

type zmqSockets struct {
	pub, replay zmq4.Socket
	cancel      context.CancelFunc
}

func (z *zmqSockets) close() {
	z.cancel()
	z.pub.Close()
	if z.replay != nil {
		z.replay.Close()
	}
}

// open binds the sockets, on the ports bound the first time.
func (p *ZMQPublisher) open(ctx context.Context) (*zmqSockets, error) {
	ctx, cancel := context.WithCancel(ctx)
	z := &zmqSockets{cancel: cancel}
	p.mu.Lock()
	ep, rep := p.endpoint, p.replayEndpoint
	p.mu.Unlock()
	if p.cfg.Connect {
		z.pub = zmq4.NewPub(ctx, zmqQuiet(), zmq4.WithAutomaticReconnect(true), zmq4.WithDialerMaxRetries(-1),
			zmq4.WithDialerRetry(50*time.Millisecond))
		if err := z.pub.Dial(ep); err != nil {
			cancel()
			return nil, fmt.Errorf("sim: ZMQ publisher connecting to %s: %w", ep, err)
		}
	} else {
		z.pub = zmq4.NewPub(ctx, zmqQuiet())
		if err := z.pub.Listen(ep); err != nil {
			cancel()
			return nil, fmt.Errorf("sim: ZMQ publisher on %s: %w", ep, err)
		}
		ep = "tcp://" + z.pub.Addr().String()
	}
	if rep != "" {
		// A subscriber that leaves mid-reply must not hold the replay
		// socket for the library's default five minutes.
		z.replay = zmq4.NewRouter(ctx, zmqQuiet(), zmq4.WithTimeout(time.Second))
		if err := z.replay.Listen(rep); err != nil {
			z.pub.Close()
			cancel()
			return nil, fmt.Errorf("sim: ZMQ replay socket on %s: %w", rep, err)
		}
		rep = "tcp://" + z.replay.Addr().String()
	}
	p.mu.Lock()
	p.endpoint, p.replayEndpoint = ep, rep
	p.mu.Unlock()
	return z, nil
}

// run publishes engine e's events; when e closes, it waits for the server's
// next engine and starts again.
func (p *ZMQPublisher) run(ctx context.Context, e *Engine, z *zmqSockets, registered chan struct{}) {
	first := sync.OnceFunc(func() { close(registered) })
	for {
		p.serve(ctx, e, z, first)
		z.close()
		if ctx.Err() != nil {
			return
		}
		// Wait for the restarted engine.
		for {
			var err error
			restarted := p.srv.restarted()
			if next := p.srv.Engine(); next != e && next != nil {
				if z, err = p.open(ctx); err == nil {
					e = next
					p.mu.Lock()
					p.published = 0
					close(p.changed)
					p.changed = make(chan struct{})
					p.mu.Unlock()
					break
				}
				p.log.Warn("sim: reopening the ZMQ publisher", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-restarted:
			}
		}
	}
}

// zmqKept is a batch kept for replay.
type zmqKept struct {
	seq     uint64
	payload []byte
}

// serve publishes e's batches and answers replay requests until e closes or
// ctx ends.
func (p *ZMQPublisher) serve(ctx context.Context, e *Engine, z *zmqSockets, registered func()) {
	var (
		mu   sync.Mutex
		kept []zmqKept
		seq  uint64
	)
	if z.replay != nil {
		go func() {
			for {
				m, err := z.replay.Recv()
				if err != nil {
					return
				}
				if len(m.Frames) != 3 || len(m.Frames[2]) != 8 {
					continue
				}
				id, start := m.Frames[0], binary.BigEndian.Uint64(m.Frames[2])
				p.mu.Lock()
				fail := p.failReplay
				p.failReplay = false
				p.mu.Unlock()
				if fail {
					if err := z.replay.Send(zmq4.NewMsgFrom(id, []byte{}, []byte("not a number"), nil)); err != nil {
						p.log.Debug("sim: ZMQ replay reply dropped", "err", err)
					}
					continue
				}
				mu.Lock()
				var send []zmqKept
				for _, k := range kept {
					if k.seq >= start {
						send = append(send, k)
					}
				}
				mu.Unlock()
				// A subscriber gone mid-reply fails a send: the rest of its
				// reply is dropped, and the next request is served.
				end := zmqKept{seq: ^uint64(0)}
				for _, k := range append(send, end) {
					if err := z.replay.Send(zmq4.NewMsgFrom(id, []byte{}, binary.BigEndian.AppendUint64(nil, k.seq), k.payload)); err != nil {
						p.log.Debug("sim: ZMQ replay reply dropped", "err", err)
						break
					}
				}
			}
		}()
	}
	var (
		from     uint64 // the engine's batch to resume at, when haveLast
		haveLast bool
	)
	send := func(b *smgcommon.KvEventBatch) error {
		if haveLast && b.GetSequenceNumber() < from {
			return nil // replayed by the engine twice
		}
		from, haveLast = b.GetSequenceNumber()+1, true
		payload := encodeZMQBatch(b, p.cfg.Shape)
		n := seq + 1
		p.mu.Lock()
		fault := p.corrupt
		p.corrupt = 0
		unsent := p.unsent > 0
		if unsent {
			p.unsent--
		}
		p.mu.Unlock()
		switch fault {
		case ZMQGarbage:
			payload = []byte{0xc1, 0xc1, 0xc1} // 0xc1 is never used in msgpack
		case ZMQHuge:
			payload = make([]byte, 64<<20)
		}
		mu.Lock()
		kept = append(kept, zmqKept{seq: seq, payload: payload})
		if len(kept) > p.cfg.Buffer {
			kept = kept[len(kept)-p.cfg.Buffer:]
		}
		mu.Unlock()
		if !unsent && !everyNth(p.cfg.SkipEvery, seq) {
			// As vLLM's publisher, a failed send (a subscriber gone
			// mid-write) is logged and publishing goes on.
			if err := z.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), binary.BigEndian.AppendUint64(nil, seq), payload)); err != nil {
				p.log.Debug("sim: ZMQ publish failed", "sequence_number", seq, "err", err)
			}
		}
		seq = n
		p.mu.Lock()
		p.published = seq
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		return nil
	}
	for {
		// The publisher lives in the engine's process, as vLLM's does: it
		// numbers every batch from the engine's first, including those
		// the engine published before this subscription (a restarted
		// engine serves as soon as it is up), not just those from now on.
		start := from
		if !haveLast {
			start = kvFromKept
		}
		err := e.subscribeKvEventsThen(ctx, start, send, registered)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errClosed):
			p.log.Info("sim: ZMQ publisher's engine ended", "err", err)
			return
		case status.Code(err) == codes.OutOfRange:
			from, haveLast = 0, false // beyond the engine's history: what it still keeps
		}
		// The engine dropped the publisher (it fell behind while a slow
		// subscriber held a send): take the batches missed from the
		// engine's history, as vLLM's publisher queues them.
		p.log.Warn("sim: ZMQ publisher resubscribing to its engine", "from", from, "err", err)
	}
}

// encodeZMQBatch writes b as vLLM's msgpack KVEventBatch.
func encodeZMQBatch(b *smgcommon.KvEventBatch, shape ZMQShape) []byte {
	var o []byte
	arrays := shape == ZMQShapeArray
	hash := func(o []byte, h int64) []byte {
		if arrays {
			return msgp.AppendInt64(o, h)
		}
		var d [32]byte
		binary.BigEndian.PutUint64(d[24:], uint64(h))
		return msgp.AppendBytes(o, d[:])
	}
	if arrays {
		o = msgp.AppendArrayHeader(o, 3)
	} else {
		o = msgp.AppendMapHeader(o, 3)
		o = msgp.AppendString(o, "ts")
	}
	o = msgp.AppendFloat64(o, b.GetTimestamp())
	if !arrays {
		o = msgp.AppendString(o, "events")
	}
	o = msgp.AppendArrayHeader(o, uint32(len(b.GetEvents())))
	for _, ev := range b.GetEvents() {
		switch {
		case ev.GetStored() != nil:
			st := ev.GetStored()
			if arrays {
				o = msgp.AppendArrayHeader(o, 7)
				o = msgp.AppendString(o, "BlockStored")
			} else {
				o = msgp.AppendMapHeader(o, 7)
				o = msgp.AppendString(o, "type")
				o = msgp.AppendString(o, "BlockStored")
				o = msgp.AppendString(o, "block_hashes")
			}
			o = msgp.AppendArrayHeader(o, uint32(len(st.GetBlocks())))
			size := int32(0)
			var tokens []uint32
			for _, bl := range st.GetBlocks() {
				o = hash(o, bl.GetBlockHash())
				size = bl.GetBlockSize()
				tokens = append(tokens, bl.GetTokenIds()...)
			}
			if !arrays {
				o = msgp.AppendString(o, "parent_block_hash")
			}
			if st.ParentBlockHash != nil {
				o = hash(o, st.GetParentBlockHash())
			} else {
				o = msgp.AppendNil(o)
			}
			if !arrays {
				o = msgp.AppendString(o, "token_ids")
			}
			o = msgp.AppendArrayHeader(o, uint32(len(tokens)))
			for _, t := range tokens {
				o = msgp.AppendUint32(o, t)
			}
			if !arrays {
				o = msgp.AppendString(o, "block_size")
			}
			o = msgp.AppendInt32(o, size)
			if !arrays {
				o = msgp.AppendString(o, "lora_id")
			}
			o = msgp.AppendNil(o)
			if !arrays {
				o = msgp.AppendString(o, "medium")
			}
			o = msgp.AppendString(o, "GPU")
		case ev.GetRemoved() != nil:
			hs := ev.GetRemoved().GetBlockHashes()
			if arrays {
				o = msgp.AppendArrayHeader(o, 3)
				o = msgp.AppendString(o, "BlockRemoved")
			} else {
				o = msgp.AppendMapHeader(o, 3)
				o = msgp.AppendString(o, "type")
				o = msgp.AppendString(o, "BlockRemoved")
				o = msgp.AppendString(o, "block_hashes")
			}
			o = msgp.AppendArrayHeader(o, uint32(len(hs)))
			for _, h := range hs {
				o = hash(o, h)
			}
			if !arrays {
				o = msgp.AppendString(o, "medium")
			}
			o = msgp.AppendString(o, "GPU")
		default:
			if arrays {
				o = msgp.AppendArrayHeader(o, 1)
			} else {
				o = msgp.AppendMapHeader(o, 1)
				o = msgp.AppendString(o, "type")
			}
			o = msgp.AppendString(o, "AllBlocksCleared")
		}
	}
	if !arrays {
		o = msgp.AppendString(o, "data_parallel_rank")
	}
	if b.DpRank != nil {
		o = msgp.AppendInt32(o, b.GetDpRank())
	} else {
		o = msgp.AppendInt(o, 0)
	}
	return o
}

// zmqQuiet silences the ZMQ library's own log lines (a peer gone away).
func zmqQuiet() zmq4.Option { return zmq4.WithLogger(log.New(io.Discard, "", 0)) }
