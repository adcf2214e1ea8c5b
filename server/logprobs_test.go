package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// Log-probabilities reach the client per chunk and in the completion, the
// same streamed or not, through every protocol and through prefill/decode
// disaggregation, where the prompt's come from the prefill engine (the
// decode engine never computes the prompt).
func TestLogprobsThroughEveryPath(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		pd       bool
	}{{"sglang", false}, {"vllm", false}, {"trtllm", false}, {"sglang", true}, {"vllm", true}} {
		t.Run(fmt.Sprintf("%s pd=%v", tc.protocol, tc.pd), func(t *testing.T) {
			workers := 1
			if tc.pd {
				workers = 2
			}
			f := startFleet(t, fleetOptions{protocol: tc.protocol, workers: workers, pd: tc.pd, text: true})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var first *kvgatev1.GenerateComplete
			for _, stream := range []bool{false, true} {
				r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: "The logprobs of a short prompt", Stream: stream,
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(6), IgnoreEos: true, Temperature: f32(0),
						Logprobs: true, TopLogprobs: 3, PromptLogprobs: true}})
				if err != nil {
					t.Fatal(err)
				}
				c := r.complete
				out, prompt := c.GetLogprobs(), c.GetPromptLogprobs()
				if len(out) != len(c.GetOutputIds()) || len(out) == 0 {
					t.Fatalf("stream=%v: %d output logprobs for %d tokens", stream, len(out), len(c.GetOutputIds()))
				}
				if int(c.GetUsage().GetPromptTokens()) != len(prompt) {
					t.Fatalf("stream=%v: %d prompt logprobs for %d prompt tokens", stream, len(prompt), c.GetUsage().GetPromptTokens())
				}
				if prompt[0].Logprob != nil {
					t.Fatalf("the first prompt token has a log-probability: %v", prompt[0])
				}
				for i, lp := range out {
					if lp.GetTokenId() != c.GetOutputIds()[i] || lp.Logprob == nil || lp.GetLogprob() > 0 || len(lp.GetTopLogprobs()) != 3 || lp.GetToken() == "" {
						t.Fatalf("stream=%v: output logprob %d is %v (token %d)", stream, i, lp, c.GetOutputIds()[i])
					}
					top := lp.GetTopLogprobs()
					for k := 1; k < len(top); k++ {
						if top[k].GetLogprob() > top[k-1].GetLogprob() {
							t.Fatalf("top logprobs are not likeliest first: %v", top)
						}
					}
				}
				for i, lp := range prompt[1:] {
					if lp.Logprob == nil || len(lp.GetTopLogprobs()) != 3 {
						t.Fatalf("prompt logprob %d is %v", i+1, lp)
					}
				}
				if stream {
					var streamed []*kvgatev1.TokenLogprob
					promptChunks := 0
					for _, ch := range r.chunks {
						if len(ch.GetLogprobs()) != 0 && len(ch.GetLogprobs()) != len(ch.GetTokenIds()) {
							t.Fatalf("a chunk has %d logprobs for %d tokens", len(ch.GetLogprobs()), len(ch.GetTokenIds()))
						}
						streamed = append(streamed, ch.GetLogprobs()...)
						if len(ch.GetPromptLogprobs()) > 0 {
							promptChunks++
						}
					}
					if len(streamed) != len(out) {
						t.Fatalf("chunks carried %d logprobs, the completion %d", len(streamed), len(out))
					}
					if promptChunks > 1 {
						t.Fatalf("%d chunks carried the prompt's logprobs; at most the first may", promptChunks)
					}
				}
				if first == nil {
					first = c
				} else if fmt.Sprint(first.GetLogprobs()) != fmt.Sprint(c.GetLogprobs()) || fmt.Sprint(first.GetPromptLogprobs()) != fmt.Sprint(c.GetPromptLogprobs()) {
					t.Fatalf("streamed and unstreamed log-probabilities differ:\n%v\n%v", first.GetLogprobs(), c.GetLogprobs())
				}
			}
		})
	}
}

// Log-probability requests the router refuses before dispatch.
func TestLogprobsValidation(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		sp   *kvgatev1.SamplingParams
		want string
	}{
		{"too many alternatives", &kvgatev1.SamplingParams{Logprobs: true, TopLogprobs: 21}, "sampling_params.top_logprobs is 21; the limit is 20"},
		{"alternatives of nothing", &kvgatev1.SamplingParams{TopLogprobs: 2}, "neither logprobs nor prompt_logprobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3}, SamplingParams: tc.sp})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("%v; want INVALID_ARGUMENT saying %q", err, tc.want)
			}
		})
	}
}
