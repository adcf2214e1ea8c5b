package workers

// Prefill/decode disaggregation serves one request on two engines: a prefill
// engine that computes the prompt's KV cache and a decode engine that
// receives it and generates. Package pd pairs the engines and runs the two
// legs; what each leg's request carries is protocol knowledge and lives here,
// behind Disaggregator: SGLang sends the same request to both engines at
// once, joined by a bootstrap room; vLLM sends a one-token prefill first and
// hands its completion's kv_transfer_params_json to the decode leg.

import (
	"encoding/json"
	"strings"

	"github.com/kvgate/kvgate/fault"
)

// Handoff is how the two legs of an SGLang request find each other: both
// carry it as disaggregated_params. vLLM ignores it (its prefill engine
// returns the handoff itself, as kv_transfer_params_json).
type Handoff struct {
	// Room is SGLang's bootstrap room: a non-negative id unique among the
	// requests in flight.
	Room int32
	// BootstrapHost is the prefill engine's host.
	BootstrapHost string
	// BootstrapPort is the prefill engine's bootstrap port.
	BootstrapPort int
}

// Disaggregator says how an engine protocol splits one request into a
// prefill leg and a decode leg. Package pd sends the legs, applies the abort
// rules and keeps the books; it asks the Disaggregator only what each leg's
// request is, so that no protocol is named outside the adapters.
type Disaggregator interface {
	// Sequential reports whether the decode leg needs the prefill leg's
	// completion (vLLM), rather than being sent at the same time (SGLang,
	// whose decode engine only receives the cache once both legs have
	// registered the room, so neither leg may wait for the other).
	Sequential() bool
	// PrefillLeg is the request the prefill engine receives for req. It
	// asks for the prompt's log-probabilities only: the decode engine
	// never computes the prompt.
	PrefillLeg(req *GenerateRequest, h Handoff) *GenerateRequest
	// DecodeLeg is the request the decode engine receives for req.
	// prefillKV is the kv_transfer_params_json of the prefill leg's
	// completion when Sequential, "" otherwise. It asks for the output's
	// log-probabilities only. An error says the prefill engine's
	// completion cannot be handed on (a fault.Precondition).
	DecodeLeg(req *GenerateRequest, h Handoff, prefillKV string) (*GenerateRequest, error)
}

// DisaggregatorOf is protocol p's way of splitting a request into legs, or a
// fault.Precondition error for a protocol that has none (the pair cannot
// serve the request, whatever the request).
func DisaggregatorOf(p Protocol) (Disaggregator, error) {
	switch p {
	case ProtocolSGLang:
		return sglangLegs{}, nil
	case ProtocolVLLM:
		return vllmLegs{}, nil
	}
	return nil, fault.Newf(fault.Precondition, "no disaggregated protocol for %s workers", p)
}

// LegLogprobs is what one leg asks for of want: the prompt's for the prefill
// leg, the output's for the decode leg; nil when that leg needs none.
func LegLogprobs(want *LogprobRequest, prefill bool) *LogprobRequest {
	want = wantLogprobs(want)
	switch {
	case want == nil:
		return nil
	case prefill && want.Prompt:
		return &LogprobRequest{Prompt: true, TopK: want.TopK}
	case !prefill && want.Output:
		return &LogprobRequest{Output: true, TopK: want.TopK}
	}
	return nil
}

// sglangLegs: the same request goes to both engines at once, each carrying
// disaggregated_params with the prefill engine's bootstrap address and the
// room. The prefill engine computes the prompt and publishes its KV cache
// under the room; the decode engine waits for the room, receives the cache
// and generates. The prefill leg ends with one completion carrying the
// prompt and cached token counts.
type sglangLegs struct{}

func (sglangLegs) Sequential() bool { return false }

func (sglangLegs) leg(req *GenerateRequest, h Handoff, prefill bool) *GenerateRequest {
	r := *req
	r.Disaggregated = &h
	r.KVTransferParamsJSON = ""
	r.NoStream = false
	r.Logprobs = LegLogprobs(req.Logprobs, prefill)
	return &r
}

func (l sglangLegs) PrefillLeg(req *GenerateRequest, h Handoff) *GenerateRequest {
	return l.leg(req, h, true)
}

func (l sglangLegs) DecodeLeg(req *GenerateRequest, h Handoff, _ string) (*GenerateRequest, error) {
	return l.leg(req, h, false), nil
}

// vllmRemoteDecode is the kv_transfer_params_json of a vLLM prefill leg: it
// asks the engine's KV connector to keep the computed cache for a remote
// decode and to describe it in its completion.
const vllmRemoteDecode = `{"do_remote_decode":true}`

// vllmLegs: vLLM's disaggregation is sequential. The prefill leg is the
// request with max_tokens=1, min_tokens=0 and stream=false, carrying
// kv_transfer_params_json {"do_remote_decode": true}; its completion carries
// the connector's handoff (kv_transfer_params_json, e.g. do_remote_prefill,
// remote_host, remote_port, remote_request_id, remote_engine_id), which the
// decode leg carries verbatim.
type vllmLegs struct{}

func (vllmLegs) Sequential() bool { return true }

func (vllmLegs) PrefillLeg(req *GenerateRequest, _ Handoff) *GenerateRequest {
	r := *req
	one := uint32(1)
	r.Sampling.MaxNewTokens = &one
	r.Sampling.MinNewTokens = 0
	r.NoStream = true
	r.KVTransferParamsJSON = vllmRemoteDecode
	r.Disaggregated = nil
	r.Logprobs = LegLogprobs(req.Logprobs, true)
	return &r
}

func (vllmLegs) DecodeLeg(req *GenerateRequest, _ Handoff, prefillKV string) (*GenerateRequest, error) {
	if err := checkKVParams(prefillKV); err != nil {
		return nil, err
	}
	r := *req
	r.KVTransferParamsJSON = prefillKV
	r.Disaggregated = nil
	r.NoStream = false
	r.Logprobs = LegLogprobs(req.Logprobs, false)
	return &r, nil
}

// checkKVParams refuses a prefill completion without a usable handoff: an
// engine whose KV connector is not a producer completes the request like a
// regular one, and a decode engine given nothing would recompute the prompt.
func checkKVParams(kv string) error {
	if kv == "" {
		return fault.Newf(fault.Precondition,
			"the engine returned no kv_transfer_params_json: it is not configured as a KV producer (kv_role kv_producer or kv_both)")
	}
	if !strings.HasPrefix(strings.TrimSpace(kv), "{") || !json.Valid([]byte(kv)) {
		return fault.Newf(fault.Precondition,
			"the engine returned kv_transfer_params_json that is not a JSON object: %.200q", kv)
	}
	return nil
}
