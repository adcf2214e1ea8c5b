package sim

import (
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/internal/testutil"
)

// checkLogprobs verifies lps against tokens at positions base, base+1, ...:
// the deterministic value (finite, at most 0), k alternatives sorted most
// likely first, distinct and within the vocabulary; with missingFirst, the
// first has no value.
func checkLogprobs(lps []tokenLogprob, tokens []uint32, base, k, vocab int, missingFirst bool) error {
	if len(lps) != len(tokens) {
		return fmt.Errorf("%d log-probabilities for %d tokens", len(lps), len(tokens))
	}
	for i, lp := range lps {
		if lp.id != tokens[i] {
			return fmt.Errorf("position %d: id %d, token is %d", i, lp.id, tokens[i])
		}
		if i == 0 && missingFirst {
			if !lp.missing || len(lp.top) != 0 {
				return fmt.Errorf("the first prompt token has a value: %+v", lp)
			}
			continue
		}
		if lp.missing {
			return fmt.Errorf("position %d has no value", i)
		}
		v := float64(lp.value)
		if math.IsNaN(v) || math.IsInf(v, 0) || v > 0 || lp.value != logprobValue(base+i, lp.id) {
			return fmt.Errorf("position %d: value %v, want logprobValue(%d, %d) = %v", i, v, base+i, lp.id, logprobValue(base+i, lp.id))
		}
		if len(lp.top) != k {
			return fmt.Errorf("position %d: %d alternatives, want %d", i, len(lp.top), k)
		}
		seen := map[uint32]bool{}
		for j, a := range lp.top {
			if seen[a.id] || int(a.id) >= vocab {
				return fmt.Errorf("position %d: alternative %d is id %d (repeated or beyond the vocabulary)", i, j, a.id)
			}
			seen[a.id] = true
			if a.value > 0 || (j > 0 && a.value > lp.top[j-1].value) {
				return fmt.Errorf("position %d: alternatives not sorted most likely first: %+v", i, lp.top)
			}
		}
	}
	return nil
}

func TestLogprobs(t *testing.T) {
	prompt := []uint32{5, 900, 31, 77, 12000}
	cases := []struct {
		name             string
		stream           bool
		output, inPrompt bool
		topK             int32
	}{
		{"stream output", true, true, false, 3},
		{"stream both", true, true, true, 2},
		{"stream prompt only", true, false, true, 0},
		{"complete output", false, true, false, 5},
		{"complete both, no alternatives", false, true, true, 0},
		{"complete prompt", false, false, true, 20},
		{"none", true, false, false, 4},
	}
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, _ client) {
		vocab := srv.Engine().Config().VocabSize
		isSGLang := srv.Engine().Config().Protocol == ProtocolSGLang
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := runLP(t, srv, lpReq{prompt: prompt, maxNew: 6, noStream: !tc.stream, output: tc.output, inPrmt: tc.inPrompt, topK: tc.topK})
				if r.err != nil || r.finish == "" {
					t.Fatalf("err %v, finish %q", r.err, r.finish)
				}
				// SGLang's return_logprob always brings the output's.
				wantOut := tc.output || (isSGLang && tc.inPrompt)
				outK := int(tc.topK)
				if tc.stream {
					var streamed []uint32
					for i, c := range r.chunks {
						streamed = append(streamed, c.tokens...)
						if len(c.prompt) > 0 && i > 0 {
							t.Errorf("chunk %d carries the prompt's log-probabilities", i)
						}
					}
					lps := r.streamedLogprobs()
					if !wantOut && lps != nil {
						t.Errorf("unasked output log-probabilities: %+v", lps)
					}
					if wantOut {
						if err := checkLogprobs(lps, streamed, len(prompt), outK, vocab, false); err != nil {
							t.Error("streamed:", err)
						}
					}
					if r.finalOut != nil || r.finalPrompt != nil {
						t.Errorf("a streamed completion repeats log-probabilities: %d output, %d prompt", len(r.finalOut), len(r.finalPrompt))
					}
					var gotPrompt []tokenLogprob
					if len(r.chunks) > 0 {
						gotPrompt = r.chunks[0].prompt
					}
					checkPrompt(t, tc.inPrompt, gotPrompt, prompt, int(tc.topK), vocab)
					return
				}
				if len(r.chunks) != 0 {
					t.Fatalf("stream=false sent %d chunks", len(r.chunks))
				}
				if !wantOut && r.finalOut != nil {
					t.Errorf("unasked output log-probabilities: %+v", r.finalOut)
				}
				if wantOut {
					if err := checkLogprobs(r.finalOut, r.outputIDs, len(prompt), outK, vocab, false); err != nil {
						t.Error("completion:", err)
					}
				}
				checkPrompt(t, tc.inPrompt, r.finalPrompt, prompt, int(tc.topK), vocab)
			})
		}
	})
}

func checkPrompt(t *testing.T, asked bool, got []tokenLogprob, prompt []uint32, k, vocab int) {
	t.Helper()
	if !asked {
		if got != nil {
			t.Errorf("unasked prompt log-probabilities: %+v", got)
		}
		return
	}
	if err := checkLogprobs(got, prompt, 0, k, vocab, true); err != nil {
		t.Error("prompt:", err)
	}
}

// SGLang's logprob_start_len reports the prompt from that position on.
func TestLogprobStartLen(t *testing.T) {
	srv, _ := startSim(t, testConfig(ProtocolSGLang))
	prompt := []uint32{5, 900, 31, 77, 12000}
	r := runLP(t, srv, lpReq{prompt: prompt, maxNew: 2, noStream: true, inPrmt: true, topK: 1, startLen: i32(2)})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := checkLogprobs(r.finalPrompt, prompt[2:], 2, 1, srv.Engine().Config().VocabSize, false); err != nil {
		t.Error(err)
	}
}

func TestLogprobsRefused(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, _ client) {
		for _, q := range []lpReq{
			{prompt: []uint32{1, 2}, maxNew: 2, output: true, topK: 21},
			{prompt: []uint32{1, 2}, maxNew: 2, inPrmt: true, topK: -1},
		} {
			wantCode(t, runLP(t, srv, q).err, codes.InvalidArgument, "alternatives")
		}
		if srv.Engine().Config().Protocol == ProtocolSGLang {
			wantCode(t, runLP(t, srv, lpReq{prompt: []uint32{1, 2}, maxNew: 2, inPrmt: true, startLen: i32(2)}).err,
				codes.InvalidArgument, "logprob_start_len")
		}
	})
}

// In PD, only the engine that computed the prompt reports its
// log-probabilities: the prefill leg with its completion, never the decode
// leg, which received the KV cache.
func TestLogprobsPD(t *testing.T) {
	forEachPD(t, nil, nil, func(t *testing.T, pp *pdPair) {
		prompt := testutil.Tokens(100, 40)
		vocab := pp.p.Engine().Config().VocabSize
		h := pp.handoffFor(7)
		pre := lpReq{prompt: prompt, maxNew: 1, inPrmt: true, topK: 2, noStream: pp.protocol == ProtocolVLLM}
		dec := lpReq{prompt: prompt, maxNew: 5, output: true, inPrmt: true, topK: 2}
		if pp.protocol == ProtocolSGLang {
			d := &sglang.DisaggregatedParams{BootstrapHost: h.host, BootstrapPort: int32(h.port), BootstrapRoom: 7}
			pre.sgDisagg, dec.sgDisagg = d, d
		} else {
			pre.kvJSON = `{"do_remote_decode": true}`
		}
		pr := runLP(t, pp.p, pre)
		if pr.err != nil {
			t.Fatal(pr.err)
		}
		if err := checkLogprobs(pr.finalPrompt, prompt, 0, 2, vocab, true); err != nil {
			t.Error("prefill leg's completion:", err)
		}
		if pp.protocol == ProtocolVLLM {
			dec.kvJSON = pr.kvJSON
		}
		dr := runLP(t, pp.d, dec)
		if dr.err != nil {
			t.Fatal(dr.err)
		}
		var streamed []uint32
		for _, c := range dr.chunks {
			streamed = append(streamed, c.tokens...)
			if c.prompt != nil {
				t.Errorf("the decode leg sent prompt log-probabilities: %+v", c.prompt)
			}
		}
		if dr.finalPrompt != nil {
			t.Errorf("the decode leg's completion has prompt log-probabilities: %+v", dr.finalPrompt)
		}
		if err := checkLogprobs(dr.streamedLogprobs(), streamed, len(prompt), 2, vocab, false); err != nil {
			t.Error("decode leg:", err)
		}
	})
}

// TestPromptLogprobsReadNoCache: a request that asks for the prompt's
// log-probabilities reuses none of its cached prompt (vLLM does not read
// its prefix cache for it, SGLang stops its match at logprob_start_len), or
// with SGLang's logprob_start_len past the first page, the whole pages
// before it. The pages are 16 tokens; the prompt, five pages, is cached
// whole by a plain request first.
func TestPromptLogprobsReadNoCache(t *testing.T) {
	prompt := make([]uint32, 80)
	for i := range prompt {
		prompt[i] = uint32(300 + i)
	}
	for _, tt := range []struct {
		name     string
		protocol string
		startLen *int32
		cached   uint64
	}{
		{"vLLM", ProtocolVLLM, nil, 0},
		{"SGLang, from the first token", ProtocolSGLang, nil, 0},
		{"SGLang, from token 40: the two pages before it", ProtocolSGLang, i32(40), 32},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, c := startSim(t, testConfig(tt.protocol))
			mustComplete(t, c, genParams{id: "plain", prompt: prompt, maxNew: u32(1), ignoreEOS: true, seed: i32(1)})
			before := srv.Engine().Stats().CachedPromptTokens
			r := runLP(t, srv, lpReq{prompt: prompt, maxNew: 1, noStream: true, inPrmt: true, topK: 1, startLen: tt.startLen})
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := srv.Engine().Stats().CachedPromptTokens - before; got != tt.cached {
				t.Fatalf("the prompt-logprob request reused %d cached tokens, want %d", got, tt.cached)
			}
		})
	}
}
