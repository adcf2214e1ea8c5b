package workers

// The ZMQ library allocates each frame at the size its header announces,
// before reading it: a publisher (or anything that connects to a bound
// subscriber) announcing a frame of a terabyte would make the router try to
// hold one. KV event subscriptions therefore speak ZMQ over a TCP transport
// of their own, zmqLimitedTCP, whose connections read the ZMTP 3 framing as
// it passes (a 64-byte greeting, then frames: a flags byte, a 1- or 8-byte
// size, the body) and fail a connection whose next frame is larger than the
// bound, before the library sees its header. The same transport tells the
// subscription when a connection ends, which the library does not: a
// publisher that went away would otherwise look like an idle one for ever.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// zmqTransportName is the scheme under which zmqLimitedTCP is registered
// with the ZMQ library; endpoints given as tcp:// are rewritten to it.
const zmqTransportName = "kvgate-tcp"

// zmqMaxFrameBytes bounds one ZMQ frame from an event publisher, as
// DefaultMaxMessageBytes bounds a gRPC KV event batch.
const zmqMaxFrameBytes = DefaultMaxMessageBytes

// The library keeps its transports in a registry of its own; ours is
// stateless (its bound is a constant and its watcher comes with each
// socket's context), so registering it once at start-up is safe.
func init() {
	if err := zmq4.RegisterTransport(zmqTransportName, zmqLimitedTCP{max: zmqMaxFrameBytes}); err != nil {
		panic(err)
	}
}

// zmqConnWatch is carried in a socket's context: the transport calls lost
// when one of the socket's connections ends.
type zmqConnWatch struct{ lost func(error) }

type zmqConnWatchKey struct{}

// zmqLimitedTCP is TCP with the frame bound above.
type zmqLimitedTCP struct{ max uint64 }

func (t zmqLimitedTCP) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return t.wrap(ctx, c), nil
}

func (t zmqLimitedTCP) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return zmqLimitedListener{Listener: l, ctx: ctx, t: t}, nil
}

func (zmqLimitedTCP) Addr(ep string) (string, error) {
	return transport.New("tcp").Addr(ep)
}

func (t zmqLimitedTCP) wrap(ctx context.Context, c net.Conn) net.Conn {
	w, _ := ctx.Value(zmqConnWatchKey{}).(*zmqConnWatch)
	return &zmqLimitedConn{Conn: c, max: t.max, greeting: 64, watch: w}
}

type zmqLimitedListener struct {
	net.Listener
	ctx context.Context
	t   zmqLimitedTCP
}

func (l zmqLimitedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.t.wrap(l.ctx, c), nil
}

// zmqLimitedConn follows the ZMTP framing of what it reads.
type zmqLimitedConn struct {
	net.Conn
	max      uint64
	watch    *zmqConnWatch
	greeting int    // greeting bytes still to come
	body     uint64 // bytes of the current frame's body still to come
	hdr      [9]byte
	nhdr     int // header bytes collected
	failed   error
}

func (c *zmqLimitedConn) Read(p []byte) (int, error) {
	if c.failed != nil {
		return 0, c.failed
	}
	n, err := c.Conn.Read(p)
	if ferr := c.scan(p[:n]); ferr != nil {
		ferr = fmt.Errorf("from %v: %w", c.RemoteAddr(), ferr)
		c.failed = ferr
		c.Conn.Close()
		c.lost(ferr)
		return 0, ferr
	}
	if err != nil {
		c.lost(err)
	}
	return n, err
}

func (c *zmqLimitedConn) lost(err error) {
	if c.watch != nil {
		c.watch.lost(err)
	}
}

// scan advances the framing state over b and fails on a frame above max.
func (c *zmqLimitedConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case c.greeting > 0:
			k := min(c.greeting, len(b))
			c.greeting -= k
			b = b[k:]
		case c.body > 0:
			k := min(c.body, uint64(len(b)))
			c.body -= k
			b = b[k:]
		default:
			c.hdr[c.nhdr] = b[0]
			c.nhdr++
			b = b[1:]
			need := 2
			if c.hdr[0]&0x02 != 0 { // a long frame: an 8-byte size
				need = 9
			}
			if c.nhdr < need {
				continue
			}
			size := uint64(c.hdr[1])
			if need == 9 {
				size = binary.BigEndian.Uint64(c.hdr[1:9])
			}
			c.nhdr = 0
			if size > c.max {
				return fmt.Errorf("a ZMQ frame of %d bytes is above the bound of %d", size, c.max)
			}
			c.body = size
		}
	}
	return nil
}
