package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// The bootstrap endpoint is how a simulated decode engine gets the KV cache a
// simulated prefill engine computed. It is our own small protocol, not
// SGLang's or vLLM's (their transfer engines move real GPU memory):
//
//	GET /bootstrap/rooms/{room}?wait_ms=N
//
// long-polls until the prefill engine has published the room, then answers
// 200 with a roomInfo as JSON and forgets the room (a room is fetched once);
// after wait_ms (default 0: answer at once) it answers 404. Rooms nobody
// fetches expire after a TTL, so they never pile up.

// roomInfo is what a prefill engine publishes for a room: enough for the
// decode side to check it got the right prompt and to charge the transfer.
type roomInfo struct {
	Room         string `json:"room"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	InputHash    string `json:"input_hash"`
}

// maxRoomWait bounds one long poll, whatever wait_ms asks.
const maxRoomWait = 5 * time.Minute

// bootstrapServer holds a prefill engine's published rooms and serves them.
type bootstrapServer struct {
	ttl    time.Duration
	closed <-chan struct{} // the engine's
	lis    net.Listener
	srv    *http.Server
	done   chan struct{}

	mu      sync.Mutex
	rooms   map[string]*heldRoom
	arrived map[string]chan struct{} // closed when the room is published
	stats   roomStats
}

type heldRoom struct {
	info   roomInfo
	expiry *time.Timer
}

type roomStats struct {
	published, fetched, expired uint64
	held                        int
}

// startBootstrap listens on host:port and serves rooms until close.
func startBootstrap(host string, port int, ttl time.Duration, closed <-chan struct{}) (*bootstrapServer, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("sim: bootstrap endpoint: listen on %s:%d: %w", host, port, err)
	}
	b := &bootstrapServer{
		ttl: ttl, closed: closed, lis: lis, done: make(chan struct{}),
		rooms: map[string]*heldRoom{}, arrived: map[string]chan struct{}{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bootstrap/rooms/{room}", b.serveRoom)
	b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(lis) // returns http.ErrServerClosed after close
	}()
	return b, nil
}

// port is the port the endpoint really listens on.
func (b *bootstrapServer) port() int { return b.lis.Addr().(*net.TCPAddr).Port }

// close stops serving; waiting fetches end (their engine is closed too).
func (b *bootstrapServer) close() {
	_ = b.srv.Close()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, r := range b.rooms {
		r.expiry.Stop()
		delete(b.rooms, id)
	}
}

// publish makes info fetchable until it is fetched or the TTL passes.
func (b *bootstrapServer) publish(info roomInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.rooms[info.Room]; ok {
		old.expiry.Stop() // a room id reused: the newer prefill wins
	}
	h := &heldRoom{info: info}
	h.expiry = time.AfterFunc(b.ttl, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.rooms[info.Room] == h {
			delete(b.rooms, info.Room)
			b.stats.expired++
		}
	})
	b.rooms[info.Room] = h
	b.stats.published++
	if ch, ok := b.arrived[info.Room]; ok {
		close(ch)
		delete(b.arrived, info.Room)
	}
}

// take removes and returns a published room, or returns a channel that is
// closed when the room is published.
func (b *bootstrapServer) take(room string) (roomInfo, bool, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.rooms[room]; ok {
		h.expiry.Stop()
		delete(b.rooms, room)
		b.stats.fetched++
		return h.info, true, nil
	}
	ch, ok := b.arrived[room]
	if !ok {
		ch = make(chan struct{})
		b.arrived[room] = ch
	}
	return roomInfo{}, false, ch
}

func (b *bootstrapServer) snapshot() roomStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.held = len(b.rooms)
	return s
}

func (b *bootstrapServer) serveRoom(w http.ResponseWriter, req *http.Request) {
	room := req.PathValue("room")
	var wait time.Duration
	if s := req.URL.Query().Get("wait_ms"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			http.Error(w, "wait_ms must be a non-negative integer", http.StatusBadRequest)
			return
		}
		wait = min(time.Duration(ms)*time.Millisecond, maxRoomWait)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		info, ok, arrived := b.take(room)
		if ok {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(info)
			return
		}
		select {
		case <-arrived:
			continue // published; another poller may still take it first
		case <-timer.C:
		case <-req.Context().Done():
		case <-b.closed:
		}
		b.mu.Lock()
		if b.arrived[room] == arrived {
			// Other pollers of this room will recreate the channel on their
			// next take; closing it wakes them to do so.
			delete(b.arrived, room)
			close(arrived)
		}
		b.mu.Unlock()
		http.Error(w, fmt.Sprintf("room %s not published", room), http.StatusNotFound)
		return
	}
}

// errRoomNotYet is a poll that ended without the room.
var errRoomNotYet = errors.New("room not published yet")

// fetchRoom long-polls hostport's bootstrap endpoint for room until ctx ends.
// It retries failed connections (the prefill engine may be starting), and
// returns ctx's error, wrapped with the last failure, if the room never came.
func fetchRoom(ctx context.Context, hc *http.Client, hostport, room string) (roomInfo, error) {
	var last error
	for {
		wait := maxRoomWait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		info, err := pollRoom(ctx, hc, hostport, room, wait)
		if err == nil {
			return info, nil
		}
		if ctx.Err() != nil {
			if last != nil && !errors.Is(last, errRoomNotYet) {
				return roomInfo{}, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return roomInfo{}, ctx.Err()
		}
		last = err
		if !errors.Is(err, errRoomNotYet) { // connection trouble: back off a little
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func pollRoom(ctx context.Context, hc *http.Client, hostport, room string, wait time.Duration) (roomInfo, error) {
	u := url.URL{Scheme: "http", Host: hostport, Path: "/bootstrap/rooms/" + url.PathEscape(room),
		RawQuery: "wait_ms=" + strconv.FormatInt(max(wait.Milliseconds(), 0), 10)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return roomInfo{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return roomInfo{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var info roomInfo
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
			return roomInfo{}, fmt.Errorf("bootstrap %s: room %s: %w", hostport, room, err)
		}
		return info, nil
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, resp.Body)
		return roomInfo{}, errRoomNotYet
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return roomInfo{}, fmt.Errorf("bootstrap %s: %s: %s", hostport, resp.Status, body)
	}
}
