package workers

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// vllmRemoteDecode is the kv_transfer_params_json of a vLLM prefill leg: it
// asks the engine's KV connector to keep the computed cache for a remote
// decode and to describe it in its completion.
const vllmRemoteDecode = `{"do_remote_decode":true}`

// runVLLM coordinates vLLM's disaggregated protocol, which is sequential: the
// prefill leg is the request with max_tokens=1, min_tokens=0, n=1 and
// stream=false, carrying kv_transfer_params_json {"do_remote_decode": true};
// its completion carries the connector's handoff (kv_transfer_params_json,
// e.g. do_remote_prefill, remote_host, remote_port, remote_request_id,
// remote_engine_id), which the decode leg carries verbatim. The prefill
// result is final (Prefill, PrefillDone) before the decode leg starts.
func runVLLM(ctx context.Context, s *pdStream, req *GenerateRequest, _ Handoff) {
	pr := *req
	one := uint32(1)
	pr.Sampling.MaxNewTokens = &one
	pr.Sampling.MinNewTokens = 0
	pr.NoStream = true
	pr.KVTransferParamsJSON = vllmRemoteDecode
	pr.Disaggregated = nil
	pr.Logprobs = legLogprobs(req.Logprobs, true)

	started := time.Now()
	if err := s.prefill.start(ctx, &pr); err != nil {
		s.endPrefill(PrefillResult{Err: err, Duration: time.Since(started)})
		s.decode.end()
		s.fail(err)
		return
	}
	kvc := make(chan string, 1)
	go func() { kvc <- s.drainPrefill(started) }()
	var kv string
	select {
	case kv = <-kvc:
	case <-ctx.Done():
		// The decode leg was never sent, so nothing waits on the prefill
		// engine's cache but the prefill leg itself.
		s.fail(clientGone(ctx))
		s.decode.end()
		s.prefill.abort()
		return
	}
	if err := s.Prefill().Err; err != nil {
		s.decode.end()
		s.fail(err)
		return
	}
	if err := checkKVParams(kv); err != nil {
		s.decode.end()
		s.fail(legError("prefill", s.prefill.w, err))
		return
	}

	dr := *req
	dr.KVTransferParamsJSON = kv
	dr.Disaggregated = nil
	dr.NoStream = false
	dr.Logprobs = legLogprobs(req.Logprobs, false)
	if err := s.decode.start(ctx, &dr); err != nil {
		s.endDecode(DecodeResult{Err: err})
		s.fail(err)
		return
	}
	s.awaitDecode(ctx, false)
}

// checkKVParams refuses a prefill completion without a usable handoff: an
// engine whose KV connector is not a producer completes the request like a
// regular one, and a decode engine given nothing would recompute the prompt.
func checkKVParams(kv string) error {
	if kv == "" {
		return status.Error(codes.FailedPrecondition,
			"the engine returned no kv_transfer_params_json: it is not configured as a KV producer (kv_role kv_producer or kv_both)")
	}
	if !strings.HasPrefix(strings.TrimSpace(kv), "{") || !json.Valid([]byte(kv)) {
		return status.Errorf(codes.FailedPrecondition,
			"the engine returned kv_transfer_params_json that is not a JSON object: %.200q", kv)
	}
	return nil
}
