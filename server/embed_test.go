package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

func embedCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEmbedThroughBothProtocols embeds a batch of text and token-id inputs
// through a router in front of SGLang engines and one in front of vLLM
// engines: each answer holds, in input order, the vector the simulated
// model computes for the input's tokens (text tokenized by the router, as
// Generate's), the same from both protocols, with its token counts and the
// worker that served the batch.
func TestEmbedThroughBothProtocols(t *testing.T) {
	inputs := []*kvgatev1.EmbedInput{
		{Text: "The quick brown fox jumps over the lazy dog."},
		{InputIds: prompt(40, 24)},
		{Text: "Embeddings map text to vectors."},
	}
	dim := sim.DefaultConfig().EmbeddingDim
	byProtocol := map[string][]*kvgatev1.Embedding{}
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: protocol, text: true})
			resp, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{RequestId: "emb-1", Inputs: inputs})
			if err != nil {
				t.Fatal(err)
			}
			if resp.RequestId != "emb-1" || (resp.Worker != f.workerURL(0) && resp.Worker != f.workerURL(1)) {
				t.Errorf("request id %q, worker %q; want emb-1 and one of the fleet's", resp.RequestId, resp.Worker)
			}
			if len(resp.Embeddings) != len(inputs) {
				t.Fatalf("%d embeddings for %d inputs", len(resp.Embeddings), len(inputs))
			}
			total := uint32(0)
			for i, in := range inputs {
				ids := in.InputIds
				if in.Text != "" {
					if ids, err = f.text.Encode(in.Text, true); err != nil {
						t.Fatal(err)
					}
				}
				got := resp.Embeddings[i]
				if want := sim.Embedding(ids, dim); !slices.Equal(got.Embedding, want) {
					t.Errorf("inputs[%d]: the vector is not the simulated model's for its %d tokens", i, len(ids))
				}
				if got.PromptTokens != uint32(len(ids)) {
					t.Errorf("inputs[%d]: prompt_tokens %d; want %d", i, got.PromptTokens, len(ids))
				}
				total += uint32(len(ids))
			}
			if u := resp.Usage; u.GetPromptTokens() != total || u.GetCompletionTokens() != 0 || u.GetCachedTokens() != 0 {
				t.Errorf("usage %v; want %d prompt tokens and nothing else", u, total)
			}
			if n := counter(t, f, "kvgate_requests_total", "method", "/kvgate.v1.Router/Embed", "code", "OK"); n != 1 {
				t.Errorf("kvgate_requests_total counts %v Embed calls; want 1", n)
			}
			if n := counter(t, f, "kvgate_worker_embed_tokens_total", "worker", resp.Worker); n != float64(total) {
				t.Errorf("kvgate_worker_embed_tokens_total is %v; want %d", n, total)
			}
			if n := counter(t, f, "kvgate_worker_prompt_tokens_total"); n != 0 {
				t.Errorf("kvgate_worker_prompt_tokens_total is %v; want embeddings kept out of it", n)
			}
			byProtocol[protocol] = resp.Embeddings
		})
	}
	a, b := byProtocol["sglang"], byProtocol["vllm"]
	if len(a) == len(inputs) && len(b) == len(inputs) {
		for i := range a {
			if !slices.Equal(a[i].Embedding, b[i].Embedding) {
				t.Errorf("inputs[%d]: SGLang's and vLLM's engines returned different vectors", i)
			}
		}
	}
}

// TestEmbedRejectsBadInput: every malformed batch is INVALID_ARGUMENT with a
// message naming the field and its limit, before any engine sees it.
func TestEmbedRejectsBadInput(t *testing.T) {
	f := startFleet(t, fleetOptions{text: true, sim: func(_ int, c *sim.Config) { c.MaxContextLength = 64 }})
	vocab := f.reg.Snapshot()[0].Info().VocabSize
	ids := func(n int) *kvgatev1.EmbedInput { return &kvgatev1.EmbedInput{InputIds: prompt(1, n)} }
	many := func(n int, in *kvgatev1.EmbedInput) []*kvgatev1.EmbedInput {
		out := make([]*kvgatev1.EmbedInput, n)
		for i := range out {
			out[i] = in
		}
		return out
	}
	tests := []struct {
		name string
		req  *kvgatev1.EmbedRequest
		want string
	}{
		{"empty batch", &kvgatev1.EmbedRequest{}, "inputs is empty; at least 1 input is required"},
		{"too many inputs", &kvgatev1.EmbedRequest{Inputs: many(129, ids(1))}, "inputs has 129 entries; the limit is 128"},
		{"an empty input", &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{ids(3), {}}},
			"inputs[1]: input_ids is empty and text is empty; an input of at least 1 token is required"},
		{"text and ids", &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: "a", InputIds: []uint32{1}}}},
			"inputs[0]: input_ids and text are both set"},
		{"token id beyond the vocabulary", &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{ids(2), {InputIds: []uint32{5, uint32(vocab)}}}},
			fmt.Sprintf("inputs[1].input_ids[1] is %d; token ids must be below the model's vocab_size %d", vocab, vocab)},
		{"an input longer than the context", &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{ids(65)}},
			"inputs[0] has 65 tokens; the model's context is 64 tokens"},
		{"a text longer than the context", &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: strings.Repeat("word ", 100)}}},
			"tokens; the model's context is 64 tokens"},
		{"too many tokens together", &kvgatev1.EmbedRequest{Inputs: many(5, ids(60_000))},
			"inputs have 300000 tokens together; the limit is 262144"},
		{"too many tokens together, counted while tokenizing", &kvgatev1.EmbedRequest{Inputs: append(many(4, ids(60_000)), &kvgatev1.EmbedInput{Text: strings.Repeat("word ", 30_000)})},
			"inputs have more than 262144 tokens together (counted up to inputs[4]); the limit is 262144"},
		{"request id too long", &kvgatev1.EmbedRequest{RequestId: strings.Repeat("r", 257), Inputs: many(1, ids(1))},
			"request_id is 257 bytes; the limit is 256"},
		{"model name too long", &kvgatev1.EmbedRequest{Model: strings.Repeat("m", 257), Inputs: many(1, ids(1))},
			"model is 257 bytes; the limit is 256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.router.Embed(embedCtx(t), tc.req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("%v; want INVALID_ARGUMENT containing %q", err, tc.want)
			}
		})
	}
	for i, s := range f.sims {
		if st := s.Engine().Stats(); st.Embeds != 0 || st.Rejected != 0 {
			t.Errorf("engine %d saw %d embeds, rejected %d; want nothing to reach it", i, st.Embeds, st.Rejected)
		}
	}
	if _, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: many(128, ids(64))}); err != nil {
		t.Errorf("a batch at every limit: %v", err)
	}
}

// TestEmbedNeedsWhatItUses: text without a tokenizer, and any Embed of a
// disaggregating router, are FAILED_PRECONDITION saying what is missing.
func TestEmbedNeedsWhatItUses(t *testing.T) {
	tests := []struct {
		name string
		o    fleetOptions
		in   *kvgatev1.EmbedInput
		want string
	}{
		{"text without a tokenizer", fleetOptions{}, &kvgatev1.EmbedInput{Text: "hi"}, "inputs[0].text needs a tokenizer"},
		{"prefill/decode disaggregation", fleetOptions{pd: true}, &kvgatev1.EmbedInput{InputIds: []uint32{1, 2}}, "Embed needs regular workers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, tc.o)
			_, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{tc.in}})
			if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("%v; want FAILED_PRECONDITION containing %q", err, tc.want)
			}
		})
	}
}

// TestEmbedFailureIsRetriedElsewhere: a worker that fails an Embed before
// answering (refusing it, stalling, or sending a mangled vector) has the
// batch retried on another, which the client never notices, and counts as
// the failing worker's retry.
func TestEmbedFailureIsRetriedElsewhere(t *testing.T) {
	tests := []struct {
		name   string
		faults sim.Faults
	}{
		{"the engine answers UNAVAILABLE", sim.Faults{Unavailable: true}},
		{"the engine never answers", sim.Faults{StallBeforeFirstToken: true}},
		{"the engine's vector contradicts its dimension", sim.Faults{GarbageStream: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testutil.NoLeaks(t)
			f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin", config: func(c *router.Config) {
				fastRetries(c)
				c.Health.FailureThreshold = 100
			}})
			f.sims[0].Engine().SetFaults(tc.faults)
			for i := range 4 {
				resp, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{
					{InputIds: prompt(100, 8)}, {InputIds: prompt(200, 8)},
				}})
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if resp.Worker != f.workerURL(1) || len(resp.Embeddings) != 2 {
					t.Fatalf("request %d: %d embeddings from %s; want 2 from the healthy worker", i, len(resp.Embeddings), resp.Worker)
				}
			}
			if n := counter(t, f, "kvgate_retries_total", "worker", f.workerURL(0)); n == 0 {
				t.Fatal("no retry counted against the failing worker")
			}
		})
	}
}

// TestEmbedWithCacheAware: cache_aware places embeddings like any request,
// and an engine that reports no cached tokens for them does not count as a
// prediction that missed.
func TestEmbedWithCacheAware(t *testing.T) {
	f := startFleet(t, fleetOptions{policy: "cache_aware"})
	in := []*kvgatev1.EmbedInput{{InputIds: prompt(7, 64)}}
	first, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	if again.Worker != first.Worker {
		t.Errorf("the same input went to %s, then %s; want the worker whose tree holds it", first.Worker, again.Worker)
	}
	if n := counter(t, f, "kvgate_cache_prediction_observations_total"); n != 0 {
		t.Errorf("%v prediction observations; want none from embeddings", n)
	}
	if n := counter(t, f, "kvgate_policy_decisions_total", "policy", "cache_aware"); n != 2 {
		t.Errorf("%v cache_aware decisions; want 2", n)
	}
}

// TestRejectedEmbedTextsAreNotCached: the texts of a batch the workers
// refuse (one input beyond the context) stay out of the tokenizer caches,
// as a rejected Generate's prompt does; those of a valid batch are cached.
func TestRejectedEmbedTextsAreNotCached(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true, sim: func(_ int, c *sim.Config) { c.MaxContextLength = 256 }})
	bad := &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: "a short text"}, {Text: strings.Repeat("word ", 400)}}}
	if _, err := f.router.Embed(embedCtx(t), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch with a text beyond the context: %v, want INVALID_ARGUMENT", err)
	}
	if n := tokenizerCache(t, f, "kvgate_tokenizer_cache_entries", "l0"); n != 0 {
		t.Fatalf("%v texts of a rejected batch were cached in L0", n)
	}
	good := &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: "a short text"}, {Text: "another one"}}}
	if _, err := f.router.Embed(embedCtx(t), good); err != nil {
		t.Fatal(err)
	}
	if n := tokenizerCache(t, f, "kvgate_tokenizer_cache_entries", "l0"); n != 2 {
		t.Fatalf("L0 holds %v entries after a valid batch of 2 texts, want 2", n)
	}
}
