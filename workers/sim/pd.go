package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Prefill/decode disaggregation. A prefill engine runs a request's prompt
// through its KV cache and latency model, completes its leg without decoding
// (SGLang: no tokens; vLLM: the one token max_tokens=1 asks for), and
// publishes the result under a bootstrap room on its bootstrap endpoint (see
// bootstrap.go). A decode engine given the room's address waits for it there
// (up to BootstrapTimeout, then UNAVAILABLE), checks it holds its own prompt,
// charges the transfer time, then decodes with no prefill charge.
//
// Rooms: SGLang names them by disaggregated_params.bootstrap_room (in
// decimal), vLLM by the prefill request's request_id, which the prefill leg
// returns as remote_request_id in kv_transfer_params_json.

// vllmKVConnector is the connector name the simulator reports to vLLM routers.
const vllmKVConnector = "KvgateSimConnector"

// pdLeg is a request's part in a disaggregated generation.
type pdLeg struct {
	prefill bool   // a prefill leg: publish room after prefill
	room    string // the room to publish or fetch; prefill "" means the request id
	from    string // decode: the prefill engine's bootstrap host:port

	remote *roomInfo // decode: the fetched room, set before admission (under Engine.mu)
}

func (e *Engine) role() string {
	if e.cfg.Role == "" {
		return RoleRegular
	}
	return e.cfg.Role
}

// BootstrapPort is the port of a prefill engine's bootstrap endpoint (0 for
// other roles).
func (e *Engine) BootstrapPort() int {
	if e.boot == nil {
		return 0
	}
	return e.boot.port()
}

// BootstrapHost is the host decode engines should fetch rooms from: the host
// the engine listens on, or 127.0.0.1 when that is a wildcard.
func (e *Engine) BootstrapHost() string { return e.bootHost }

// inputHash names a prompt, so a decode engine can tell it was handed the KV
// cache of a different prompt.
func inputHash(prompt []uint32) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// transferTime is the unscaled time to move tokens' KV at gbps GB/s.
func transferTime(tokens int, gbps float64) time.Duration {
	return time.Duration(float64(tokens) * KVBytesPerToken / (gbps * 1e9) * float64(time.Second))
}

// sglangLeg checks a request's disaggregated_params against the engine's role.
func (e *Engine) sglangLeg(present bool, host string, port, room int32) (*pdLeg, error) {
	switch e.role() {
	case RolePrefill:
		if !present {
			return nil, e.invalid("prefill engine needs disaggregated_params")
		}
		return &pdLeg{prefill: true, room: strconv.FormatInt(int64(room), 10)}, nil
	case RoleDecode:
		if !present {
			return nil, e.invalid("decode engine needs disaggregated_params")
		}
		if host == "" || port <= 0 || port > 65535 {
			return nil, e.invalid("decode engine needs disaggregated_params with bootstrap_host and bootstrap_port (got %q, %d)", host, port)
		}
		return &pdLeg{room: strconv.FormatInt(int64(room), 10), from: net.JoinHostPort(host, strconv.Itoa(int(port)))}, nil
	}
	return nil, nil // regular: PD parameters are ignored
}

// vllmLeg checks a request's kv_transfer_params_json against the engine's
// role. maxTokens is the request's max_tokens (nil: unset).
func (e *Engine) vllmLeg(paramsJSON *string, maxTokens *uint32) (*pdLeg, error) {
	role := e.role()
	if role == RoleRegular {
		return nil, nil
	}
	var p map[string]any
	if paramsJSON != nil {
		if err := json.Unmarshal([]byte(*paramsJSON), &p); err != nil {
			return nil, e.invalid("kv_transfer_params_json is not a JSON object: %v", err)
		}
	}
	if role == RolePrefill {
		if b, _ := p["do_remote_decode"].(bool); !b {
			return nil, e.invalid(`prefill engine needs kv_transfer_params_json with "do_remote_decode": true`)
		}
		if maxTokens != nil && *maxTokens != 1 {
			return nil, e.invalid("prefill engine produces one token: max_tokens must be 1, got %d", *maxTokens)
		}
		return &pdLeg{prefill: true}, nil
	}
	if b, _ := p["do_remote_prefill"].(bool); !b {
		return nil, e.invalid(`decode engine needs kv_transfer_params_json with "do_remote_prefill": true`)
	}
	host, _ := p["remote_host"].(string)
	id, _ := p["remote_request_id"].(string)
	port, ok := jsonPort(p["remote_port"])
	if host == "" || id == "" || !ok {
		return nil, e.invalid("decode engine needs remote_host, remote_port and remote_request_id in kv_transfer_params_json, got %s", *paramsJSON)
	}
	return &pdLeg{room: id, from: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// jsonPort accepts a port as a JSON number or a decimal string.
func jsonPort(v any) (int, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		n, err := strconv.Atoi(x)
		if err != nil {
			return 0, false
		}
		f = float64(n)
	default:
		return 0, false
	}
	if f != math.Trunc(f) || f <= 0 || f > 65535 {
		return 0, false
	}
	return int(f), true
}

// vllmKVParams is what a vLLM prefill leg returns for its decode leg.
func (e *Engine) vllmKVParams(id string) string {
	b, _ := json.Marshal(map[string]any{
		"do_remote_prefill": true,
		"remote_host":       e.bootHost,
		"remote_port":       e.BootstrapPort(),
		"remote_request_id": id,
		"remote_engine_id":  fmt.Sprintf("%s-%d", e.cfg.Model, e.BootstrapPort()),
	})
	return string(b)
}

// receiveKV registers a decode leg, waits for its room, checks it, charges
// the transfer and queues the request for decoding. On error the request has
// already ended and the error is the stream's final status.
func (e *Engine) receiveKV(ctx context.Context, r *request, send func(output) error) error {
	e.mu.Lock()
	err := e.registerLocked(r)
	if err == nil {
		r.state = stateTransfer
		e.counters.roomWaits++
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	info, err := e.awaitRoom(ctx, r)
	if err != nil {
		return e.interrupted(ctx, r, nil, send, err)
	}
	if info.InputHash != inputHash(r.prompt) || info.PromptTokens != len(r.prompt) {
		return e.interrupted(ctx, r, nil, send, status.Errorf(codes.FailedPrecondition,
			"sim: bootstrap room %s from %s holds a different prompt (%d tokens, hash %s) than this request (%d tokens, hash %s)",
			r.pd.room, r.pd.from, info.PromptTokens, info.InputHash, len(r.prompt), inputHash(r.prompt)))
	}
	if err := e.sleepUntil(ctx, r, time.Now().Add(e.scale(transferTime(len(r.prompt), e.cfg.KVTransferGBps)))); err != nil {
		return e.interrupted(ctx, r, nil, send, err)
	}
	e.mu.Lock()
	if r.state != stateTransfer { // an Abort got there first
		e.mu.Unlock()
		return e.interrupted(ctx, r, nil, send, errAborted)
	}
	r.pd.remote = &info
	e.counters.transferTokens += uint64(len(r.prompt))
	e.queueLocked(r)
	e.mu.Unlock()
	return nil
}

// awaitRoom long-polls the prefill engine's bootstrap endpoint for r's room
// until it arrives, BootstrapTimeout passes (UNAVAILABLE), the request is
// aborted, the client goes away, or the engine closes.
func (e *Engine) awaitRoom(ctx context.Context, r *request) (roomInfo, error) {
	wctx, cancel := context.WithTimeout(ctx, e.cfg.BootstrapTimeout)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-r.aborted:
			cancel()
		case <-e.closed:
			cancel()
		case <-stop:
		}
	}()
	info, err := fetchRoom(wctx, e.hc, r.pd.from, r.pd.room)
	if err == nil {
		return info, nil
	}
	select {
	case <-r.aborted:
		return roomInfo{}, errAborted
	case <-e.closed:
		return roomInfo{}, errClosed
	default:
	}
	if ctx.Err() != nil {
		return roomInfo{}, ctx.Err()
	}
	e.mu.Lock()
	e.counters.roomTimeouts++
	e.mu.Unlock()
	detail := strings.TrimPrefix(err.Error(), context.DeadlineExceeded.Error()) // " (last error: ...)", if any
	return roomInfo{}, status.Errorf(codes.Unavailable, "sim: bootstrap room %s never arrived from %s within %v%s",
		r.pd.room, r.pd.from, e.cfg.BootstrapTimeout, detail)
}

// finishPrefill completes a prefill leg whose prefill has run: it caches the
// prompt (already done on admission), publishes the room and sends the
// completion. Injected faults strike before anything is published.
func (e *Engine) finishPrefill(ctx context.Context, r *request, cached uint32, send func(output) error) error {
	f := e.Faults()
	if f.DropAfterTokens > 0 {
		e.end(r, endFailed, nil)
		return status.Error(codes.Unavailable, "sim: injected fault: prefill engine died before completing the prefill")
	}
	if f.StallAfterTokens > 0 {
		if err := e.injectFaults(ctx, r, make([]uint32, f.StallAfterTokens)); err != nil {
			return e.interrupted(ctx, r, nil, send, err)
		}
	}
	var out []uint32
	if e.cfg.Protocol == ProtocolVLLM { // vLLM's prefill leg samples its one token
		tok, _ := r.sample.next(0)
		out = []uint32{tok}
		e.progress(r)
		if r.stream {
			o := output{tokens: out, promptTokens: uint32(len(r.prompt)), completionTokens: 1, cachedToks: cached,
				logprobs: r.lp.outputLogprobs(len(r.prompt), out, 0, e.cfg.VocabSize), promptLogprobs: e.promptLogprobs(r)}
			if err := send(o); err != nil {
				e.end(r, endCancelled, nil)
				return err
			}
		}
	}
	if !e.end(r, endFinished, out) {
		return e.interrupted(ctx, r, out, send, errAborted)
	}
	room := r.pd.room
	if room == "" {
		room = r.id
	}
	if !f.NeverPublish {
		e.boot.publish(roomInfo{Room: room, PromptTokens: len(r.prompt), CachedTokens: int(cached), InputHash: inputHash(r.prompt)})
	}
	c := &completion{outputIDs: out, finishReason: "length"}
	if e.cfg.Protocol == ProtocolVLLM {
		c.kvTransferJSON = e.vllmKVParams(r.id)
	}
	fin := output{promptTokens: uint32(len(r.prompt)), completionTokens: uint32(len(out)), cachedToks: cached, final: c}
	if !r.stream {
		fin.logprobs = r.lp.outputLogprobs(len(r.prompt), out, 0, e.cfg.VocabSize)
	}
	if !r.stream || len(out) == 0 { // no chunk carried them
		fin.promptLogprobs = e.promptLogprobs(r)
	}
	return send(fin)
}

// newBootstrapClient is a decode engine's HTTP client for bootstrap
// endpoints: direct (no proxy from the environment), keeping connections.
func newBootstrapClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return &http.Client{Transport: t}
}
