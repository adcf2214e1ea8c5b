package sim

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

// newClient opens a new client connection to srv; it closes with t.
func newClient(t *testing.T, srv *Process, protocol string) client {
	t.Helper()
	conn := testutil.Dial(t, srv.Addr())
	if protocol == ProtocolSGLang {
		return sglangClient{sglang.NewSglangSchedulerClient(conn)}
	}
	return vllmClient{vllm.NewVllmEngineClient(conn)}
}

// TestStallBeforeFirstToken: the request is accepted and admitted but
// nothing is sent; an Abort ends it with an empty "abort" completion, a
// client that goes away frees it; switching the fault off at run time lets
// the next request through.
func TestStallBeforeFirstToken(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		e := srv.Engine()
		e.SetFaults(Faults{StallBeforeFirstToken: true})
		ctx := context.Background()
		p := genParams{id: "hung", prompt: prompt(1, 40), maxNew: u32(10), ignoreEOS: true}

		recv, err := c.generate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the stalled request to be admitted", func() bool { return e.Stats().Running == 1 })
		if r := generate(t, c, genParams{id: "hung", prompt: prompt(3, 4), maxNew: u32(1)}); status.Code(r.err) != codes.AlreadyExists {
			t.Fatalf("a duplicate of a stalled id: %v, want ALREADY_EXISTS", r.err)
		}
		if err := c.abort(ctx, "hung"); err != nil {
			t.Fatal(err)
		}
		r := collect(recv)
		if r.err != nil || len(r.chunks) != 0 || r.final == nil || r.final.finishReason != "abort" || len(r.final.outputIDs) != 0 {
			t.Fatalf("aborted stalled stream: %d chunks, final %+v, err %v", len(r.chunks), r.final, r.err)
		}
		if st := e.Stats(); st.GeneratedTokens != 0 || st.Running != 0 || st.PinnedPages != 0 {
			t.Fatalf("after the abort: %+v", st)
		}

		cctx, cancel := context.WithCancel(ctx)
		p.id = "left"
		recv, err = c.generate(cctx, p)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the second stalled request to be admitted", func() bool { return e.Stats().Running == 1 })
		cancel()
		if r := collect(recv); status.Code(r.err) != codes.Canceled || len(r.chunks) != 0 {
			t.Fatalf("cancelled stalled stream: %d chunks, err %v", len(r.chunks), r.err)
		}
		testutil.Eventually(t, "the cancelled request to be freed", func() bool { st := e.Stats(); return st.Running == 0 && st.Cancelled == 1 })

		e.SetFaults(Faults{})
		p.id = "ok"
		mustComplete(t, c, p)
	})
}

// TestGarbageStream pins what the fault sends: chunk i carries VocabSize+i,
// the completion carries the sampled ids (in vocabulary, so contradicting the
// chunks); without streaming, the completion's ids are VocabSize+i.
func TestGarbageStream(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.GarbageStream = true }, func(t *testing.T, srv *Process, c client) {
		vocab := uint32(srv.Engine().Config().VocabSize)
		p := genParams{prompt: prompt(1, 20), maxNew: u32(4), ignoreEOS: true}

		r := mustComplete(t, c, p)
		streamed := r.streamed()
		if len(streamed) != 4 || len(r.final.outputIDs) != 4 {
			t.Fatalf("streamed %v, output_ids %v", streamed, r.final.outputIDs)
		}
		for i, id := range streamed {
			if id != vocab+uint32(i) {
				t.Errorf("chunk %d: id %d, want %d", i, id, vocab+uint32(i))
			}
			if out := r.final.outputIDs[i]; out >= vocab {
				t.Errorf("output_ids[%d] = %d, want a sampled id below %d", i, out, vocab)
			}
		}

		p.noStream = true
		r = mustComplete(t, c, p)
		if len(r.chunks) != 0 || len(r.final.outputIDs) != 4 {
			t.Fatalf("non-streaming: %d chunks, output_ids %v", len(r.chunks), r.final.outputIDs)
		}
		for i, id := range r.final.outputIDs {
			if id != vocab+uint32(i) {
				t.Errorf("non-streaming output_ids[%d] = %d, want %d", i, id, vocab+uint32(i))
			}
		}

		srv.Engine().SetFaults(Faults{})
		p.noStream = false
		r = mustComplete(t, c, p)
		for i, id := range r.streamed() {
			if id != r.final.outputIDs[i] || id >= vocab {
				t.Errorf("after clearing the fault, chunk %d: %d, output_ids %v", i, id, r.final.outputIDs)
			}
		}
	})
}

// TestKillRestart: Kill breaks in-flight streams with UNAVAILABLE and
// refuses connections; Restart serves at the same address with an empty KV
// cache; Restart after Stop fails.
func TestKillRestart(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.StallAfterTokens = 1 }, func(t *testing.T, srv *Process, c client) {
		ctx := context.Background()
		proto := srv.Engine().Config().Protocol
		addr := srv.Addr()
		recv := stalled(t, ctx, c, "in-flight", 1)

		srv.Kill()
		if r := collect(recv); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("in-flight stream after Kill: %v, want UNAVAILABLE", r.err)
		}
		if r := generate(t, newClient(t, srv, proto), genParams{prompt: prompt(1, 8), maxNew: u32(1)}); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("new request to a killed engine: %v, want UNAVAILABLE", r.err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		if srv.Addr() != addr {
			t.Fatalf("restarted at %s, want %s", srv.Addr(), addr)
		}
		if err := srv.Restart(); err == nil {
			t.Fatal("Restart of a running server succeeded")
		}

		// The restarted engine starts with Start's faults and an empty
		// cache: the same prompt twice is a miss, then a hit.
		e := srv.Engine()
		e.SetFaults(Faults{})
		if st := e.Stats(); st.Requests != 0 || st.CachedPages != 0 {
			t.Fatalf("restarted engine is not fresh: %+v", st)
		}
		c2 := newClient(t, srv, proto)
		p := genParams{prompt: prompt(1, 40), maxNew: u32(2), ignoreEOS: true}
		if r := mustComplete(t, c2, p); r.final.cached != 0 {
			t.Fatalf("first request after restart: cached %d", r.final.cached)
		}
		if r := mustComplete(t, c2, p); r.final.cached == 0 {
			t.Fatal("second request after restart: no cache hit")
		}

		srv.Stop()
		if err := srv.Restart(); err == nil {
			t.Fatal("Restart after Stop succeeded")
		}
	})
}
