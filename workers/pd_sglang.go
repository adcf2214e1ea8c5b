package workers

import (
	"context"
	"sync"
	"time"
)

// runSGLang coordinates SGLang's disaggregated protocol: the same request goes
// to both engines at once, each carrying disaggregated_params with the
// prefill engine's bootstrap address and the room. The prefill engine
// computes the prompt and publishes its KV cache under the room; the decode
// engine waits for the room, receives the cache and generates. The decode leg
// is streamed to the caller; the prefill leg is drained in the background and
// ends with one completion carrying the prompt and cached token counts.
func runSGLang(ctx context.Context, s *pdStream, req *GenerateRequest, h Handoff) {
	legReq := *req
	legReq.Disaggregated = &h
	legReq.KVTransferParamsJSON = ""
	legReq.NoStream = false

	// Both legs are sent concurrently: the decode engine only starts
	// receiving once both sides have registered the room, so neither may
	// wait for the other.
	started := time.Now()
	var perr, derr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		pr := legReq
		pr.Logprobs = legLogprobs(req.Logprobs, true)
		perr = s.prefill.start(ctx, &pr)
	}()
	go func() {
		defer wg.Done()
		dr := legReq
		dr.Logprobs = legLogprobs(req.Logprobs, false)
		derr = s.decode.start(ctx, &dr)
	}()
	wg.Wait()

	if derr != nil {
		// Nothing was decoded, so the prefill leg has nobody to hand its
		// cache to.
		s.endDecode(DecodeResult{Err: derr})
		s.fail(derr)
		if perr != nil {
			s.endPrefill(PrefillResult{Err: perr, Duration: time.Since(started)})
			return
		}
		s.prefill.abort()
		s.drainPrefill(started)
		return
	}
	if perr != nil {
		// The decode leg is running: awaitDecode sees the prefill failure
		// and applies the first-item rule to it.
		s.endPrefill(PrefillResult{Err: perr, Duration: time.Since(started)})
	} else {
		go s.drainPrefill(started)
	}
	s.awaitDecode(ctx, true)
}
