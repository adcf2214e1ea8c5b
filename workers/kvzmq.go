package workers

// Some engines publish their KV events over ZMQ rather than through a
// SubscribeKvEvents RPC: vLLM's ZmqEventPublisher sends each batch as a
// three-frame message (topic, an 8-byte big-endian sequence number, the
// msgpack batch) on a PUB socket, and keeps the last batches for a ROUTER
// "replay" socket that answers a request (an empty frame, then the 8-byte
// number to start from) with the kept batches from there, each as (empty,
// number, batch), and a last (empty, -1, empty). ZMQEventSource is such a
// publisher behind the same KVEventSource seam as the gRPC streams: the
// subscription (kvSub) numbers, resets, backs off and bounds it as any
// other.
//
// What ZMQ adds is that a PUB socket drops what a slow or late subscriber
// misses, where a gRPC stream would have failed. The stream fills such
// holes itself from the replay socket, when there is one, before the
// subscription sees them: a batch numbered past the next expected one is
// preceded by the replayed batches in between. A resumed stream (start > 0)
// first asks the replay socket for what it missed while away (from the
// last batch the subscription applied, which it compares with the one it
// gets back: see kvsub_restart.go); if its first live batch is numbered
// below start, the publisher restarted, and the replay from 0 recovers the
// restarted process's first batches. What the
// replay cannot fill reaches kvSub as the gap it is: by the numbers, or,
// for a restarted publisher whose first batches are lost, as a
// KVEventsLostError (its first batch on hand would otherwise read as the
// new process's start).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"time"

	"github.com/go-zeromq/zmq4"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
)

// ZMQEventConfig says where a worker's engine publishes its KV events.
type ZMQEventConfig struct {
	// Endpoint is the publisher's PUB socket, tcp://host:port, which the
	// subscription connects to; tcp://*:port (or a host of 0.0.0.0 or
	// [::]) makes it bind that port instead, for publishers that connect.
	Endpoint string
	// Bind binds Endpoint whatever its host (an interface of this host),
	// for publishers that connect.
	Bind bool
	// Replay is the publisher's ROUTER replay socket, tcp://host:port; empty
	// when it has none (holes then reset the worker's mirror).
	Replay string
	// Topic is the topic the publisher sends under (vLLM's default is
	// empty); messages of any other topic are ignored.
	Topic string
	// ReplayTimeout bounds one replay request; 0 means 5 s.
	ReplayTimeout time.Duration
}

// Validate reports the first field that cannot work.
func (c ZMQEventConfig) Validate() error {
	if _, _, err := zmqEndpoint(c.Endpoint); err != nil {
		return fmt.Errorf("ZMQ KV event endpoint: %w", err)
	}
	if c.Replay != "" {
		if _, bind, err := zmqEndpoint(c.Replay); err != nil {
			return fmt.Errorf("ZMQ KV event replay endpoint: %w", err)
		} else if bind {
			return fmt.Errorf("ZMQ KV event replay endpoint %q: the replay socket is the publisher's; give its host", c.Replay)
		}
	}
	if c.ReplayTimeout < 0 {
		return fmt.Errorf("ZMQ KV event replay timeout %v is negative", c.ReplayTimeout)
	}
	return nil
}

// zmqEndpoint checks a tcp:// endpoint and returns it under the bounded
// transport, and whether the subscriber binds it.
func zmqEndpoint(ep string) (string, bool, error) {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("%q is not tcp://host:port", ep)
	}
	host := u.Hostname()
	bind := host == "*" || host == "0.0.0.0" || host == "::"
	return zmqTransportName + "://" + u.Host, bind, nil
}

// ZMQEventSource subscribes to one publisher; see the file comment.
type ZMQEventSource struct {
	cfg ZMQEventConfig
}

// NewZMQEventSource validates cfg and returns its source.
func NewZMQEventSource(cfg ZMQEventConfig) (*ZMQEventSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReplayTimeout == 0 {
		cfg.ReplayTimeout = 5 * time.Second
	}
	return &ZMQEventSource{cfg: cfg}, nil
}

var _ KVEventSource = (*ZMQEventSource)(nil)

// SubscribeKVEvents connects (or binds) a SUB socket; batches numbered from
// start on are replayed first when start > 0 and the publisher has a replay
// socket. Failing to reach the publisher is an Unavailable fault.
func (s *ZMQEventSource) SubscribeKVEvents(ctx context.Context, start uint64) (KVEventStream, error) {
	ep, bind, _ := zmqEndpoint(s.cfg.Endpoint)
	bind = bind || s.cfg.Bind
	ctx, cancel := context.WithCancel(ctx)
	st := &zmqStream{cfg: &s.cfg, ctx: ctx, cancel: cancel, next: map[int]uint64{}, lost: make(chan error, 1)}
	watch := &zmqConnWatch{lost: func(err error) {
		select {
		case st.lost <- err:
		default:
		}
	}}
	sctx := context.WithValue(ctx, zmqConnWatchKey{}, watch)
	st.sub = zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(zmqQuietLog()))
	context.AfterFunc(ctx, func() { st.sub.Close() })
	if err := st.sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		cancel()
		return nil, fault.Newf(fault.Bug, "ZMQ KV events: subscribing to topic %q: %w", s.cfg.Topic, err)
	}
	var err error
	if bind {
		err = st.sub.Listen(ep)
	} else {
		err = st.sub.Dial(ep)
	}
	if err != nil {
		cancel()
		return nil, fault.Newf(fault.Unavailable, "ZMQ KV events: %s %s: %w", map[bool]string{true: "binding", false: "connecting to"}[bind], s.cfg.Endpoint, err)
	}
	st.recv = make(chan zmqMsg)
	go st.pump()
	st.start, st.fresh = start, true
	return st, nil
}

// zmqMsg is one message of the SUB socket.
type zmqMsg struct {
	frames [][]byte
	err    error
}

// zmqStream is one subscription's stream; Recv is called from one
// goroutine.
type zmqStream struct {
	cfg    *ZMQEventConfig
	ctx    context.Context
	cancel context.CancelFunc
	sub    zmq4.Socket
	recv   chan zmqMsg
	lost   chan error
	dec    zmqDecoder

	start   uint64 // the number asked for (0: from now on)
	fresh   bool   // the first live batch is still awaited
	pending []*KVEventBatch
	next    map[int]uint64 // per rank, the number after the last one returned
}

// pump receives the SUB socket's messages until the stream ends.
func (st *zmqStream) pump() {
	for {
		m, err := st.sub.Recv()
		select {
		case st.recv <- zmqMsg{frames: m.Frames, err: err}:
		case <-st.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Recv returns the next batch, filling holes from the replay socket.
func (st *zmqStream) Recv() (*KVEventBatch, error) {
	for {
		if len(st.pending) > 0 {
			b := st.pending[0]
			st.pending = st.pending[1:]
			st.next[b.DPRank] = b.Seq + 1
			return b, nil
		}
		b, err := st.live()
		if err != nil {
			st.cancel()
			return nil, err
		}
		if b == nil {
			continue // another topic
		}
		if st.fresh {
			// The first live batch: replay what was missed since start,
			// or since 0 when the publisher restarted (numbers below
			// start) or the stream is new. A PUB socket sends a new
			// subscriber nothing until its subscription has reached it,
			// so even a new stream may have missed the first batches;
			// a publisher that no longer keeps batch 0 replays nothing,
			// and the stream starts at b, from now on.
			from := st.start
			restarted := b.Seq < from
			if restarted {
				from = 0
			}
			st.fresh = false
			if err := st.fill(from, b, restarted); err != nil {
				st.cancel()
				return nil, err
			}
			continue
		}
		next, known := st.next[b.DPRank]
		switch {
		case known && b.Seq < next:
			continue // already returned (replayed before it came live)
		case known && b.Seq > next:
			_ = st.fill(next, b, false) // a hole the numbers show
			continue
		}
		st.next[b.DPRank] = b.Seq + 1
		return b, nil
	}
}

// live waits for the next message of the configured topic and decodes it;
// nil without an error for a message of another topic.
func (st *zmqStream) live() (*KVEventBatch, error) {
	select {
	case <-st.ctx.Done():
		return nil, status.FromContextError(st.ctx.Err()).Err()
	case err := <-st.lost:
		return nil, fault.Newf(fault.Unavailable, "ZMQ KV events: the connection to %s ended: %w", st.cfg.Endpoint, err)
	case m := <-st.recv:
		if m.err != nil {
			return nil, fault.Newf(fault.Unavailable, "ZMQ KV events from %s: %w", st.cfg.Endpoint, m.err)
		}
		if len(m.frames) != 3 {
			return nil, fault.Newf(fault.Corrupt, "ZMQ KV events from %s: a message of %d frames, want 3 (topic, sequence, batch)", st.cfg.Endpoint, len(m.frames))
		}
		if string(m.frames[0]) != st.cfg.Topic {
			return nil, nil
		}
		if len(m.frames[1]) != 8 {
			return nil, fault.Newf(fault.Corrupt, "ZMQ KV events from %s: a sequence number of %d bytes, want 8", st.cfg.Endpoint, len(m.frames[1]))
		}
		return st.dec.decode(binary.BigEndian.Uint64(m.frames[1]), m.frames[2])
	}
}

// fill queues the replayed batches of live's rank numbered from from up to
// live, then live itself. Without a replay socket, or when the replay
// fails or no longer keeps from, what it brought (a whole prefix) is
// queued before live, and the subscription sees the hole by the numbers.
// Not so when the publisher restarted (live is numbered below what the
// subscription expects) and nothing came before live: the subscription
// would take live for the new process's start, so the loss is returned as
// a KVEventsLostError instead.
func (st *zmqStream) fill(from uint64, live *KVEventBatch, restarted bool) error {
	var got []*KVEventBatch
	err := errors.New("the publisher has no replay socket")
	if st.cfg.Replay != "" && from < live.Seq {
		got, err = st.replay(from, live)
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("the replay socket no longer keeps batch %d", from)
		}
	}
	if restarted && from < live.Seq && len(got) == 0 {
		return &KVEventsLostError{Rank: live.DPRank, From: from, To: live.Seq, Err: err}
	}
	st.pending = append(st.pending, got...)
	st.pending = append(st.pending, live)
	return nil
}

// zmqReplayEnd is the number that ends a replay: -1 as 8 bytes.
const zmqReplayEnd = ^uint64(0)

// replay asks the replay socket for the batches from from on and returns
// those of live's rank numbered below live, in order and without holes
// (a reply with a hole is cut there). A reply that serves is read to its
// end marker, but no further than zmqReplayMax messages: a publisher that
// writes to a subscriber gone mid-reply may hold its socket meanwhile.
//
// A request whose reply has not begun within zmqReplayAttempt is asked
// again on a new connection, until ReplayTimeout: a ROUTER socket drops a
// reply to a peer it has not finished registering.
func (st *zmqStream) replay(from uint64, live *KVEventBatch) ([]*KVEventBatch, error) {
	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.ReplayTimeout)
	defer cancel()
	for {
		out, err := st.replayOnce(ctx, from, live)
		if !errors.Is(err, errZMQReplayNoAnswer) || ctx.Err() != nil {
			return out, err
		}
	}
}

// errZMQReplayNoAnswer: the replay socket did not begin its reply in time.
var errZMQReplayNoAnswer = errors.New("the replay socket did not answer")

// zmqReplayAttempt is how long one replay request waits for its reply to
// begin.
const zmqReplayAttempt = 500 * time.Millisecond

func (st *zmqStream) replayOnce(ctx context.Context, from uint64, live *KVEventBatch) ([]*KVEventBatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ep, _, _ := zmqEndpoint(st.cfg.Replay)
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(zmqQuietLog()))
	defer d.Close()
	if err := d.Dial(ep); err != nil {
		return nil, err
	}
	req := binary.BigEndian.AppendUint64(nil, from)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, req)); err != nil {
		return nil, err
	}
	answered := make(chan struct{})
	silent := time.AfterFunc(zmqReplayAttempt, func() {
		select {
		case <-answered:
		default:
			cancel()
		}
	})
	defer silent.Stop()
	var out []*KVEventBatch
	want := from
	for i := range zmqReplayMax {
		m, err := d.Recv()
		if i == 0 {
			close(answered)
		}
		if err != nil {
			if i == 0 && ctx.Err() != nil {
				return nil, errZMQReplayNoAnswer
			}
			return out, err
		}
		f := m.Frames
		if len(f) == 3 && len(f[0]) == 0 {
			f = f[1:] // the empty delimiter
		}
		if len(f) != 2 || len(f[0]) != 8 {
			return out, errors.New("a replay message that is not (sequence, batch)")
		}
		seq := binary.BigEndian.Uint64(f[0])
		switch {
		case seq == zmqReplayEnd:
			return out, nil
		case seq < want || seq >= live.Seq:
			continue
		case seq > want:
			// The publisher no longer has want: the rest of its buffer
			// (10,000 batches by default) is of no use. vLLM's ROUTER
			// drops what it cannot deliver, so leaving is safe.
			return out, nil
		}
		b, err := st.dec.decode(seq, f[1])
		if err != nil {
			return out, err
		}
		if b.DPRank == live.DPRank {
			out = append(out, b)
		}
		want++
	}
	return out, nil
}

// zmqReplayMax bounds the messages one replay reads: vLLM keeps 10,000
// batches by default.
const zmqReplayMax = 100_000

// zmqQuietLog is the ZMQ library's logger: its lines (a peer that went
// away) say what the subscription's own logs say better.
func zmqQuietLog() *log.Logger { return log.New(io.Discard, "", 0) }
