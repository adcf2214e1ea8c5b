package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
)

// headTokens is how many leading prompt tokens a request log's prefix
// names: fewer than any workload's shared part (a shared-prefix group's
// system prompt, a conversation's), more than a chat template's opening.
const headTokens = 32

// headHash hashes the prompt's first headTokens tokens (all of a shorter
// one).
func headHash(prompt []uint32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range prompt[:min(len(prompt), headTokens)] {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	return h.Sum64()
}

// RequestLine is one request of a run as WriteRequests writes it: enough
// to see, request by request, where each prefix went and what it waited.
type RequestLine struct {
	// Policy is the run's label, as the table names it.
	Policy string `json:"policy"`
	// SentMS is when the request was sent, in ms after the run began.
	SentMS float64 `json:"sent_ms"`
	// Prefix names the prompt's first 32 tokens (a hash): requests that
	// begin alike share it.
	Prefix string `json:"prefix"`
	Worker string `json:"worker,omitempty"`
	// TTFTMS and E2EMS are the time to first token and to the last, in ms.
	TTFTMS float64 `json:"ttft_ms"`
	E2EMS  float64 `json:"e2e_ms"`
	Prompt int     `json:"prompt_tokens"`
	// Cached is what the engine reported it found cached; Oracle what one
	// unlimited cache shared by every engine would have held.
	Cached int    `json:"cached_tokens"`
	Oracle int    `json:"oracle_tokens"`
	Error  string `json:"error,omitempty"`
}

// WriteRequests writes every request of the report's runs, one JSON object
// (a RequestLine) per line, each run's in the order they were sent.
func (rep *Report) WriteRequests(w io.Writer) error {
	enc := json.NewEncoder(w)
	replicated := rep.replicated()
	for _, r := range rep.Runs {
		label := runLabel(r.Policy, r.Routers, replicated)
		os := slices.Clone(r.outcomes)
		slices.SortStableFunc(os, func(a, b outcome) int { return a.sent.Compare(b.sent) })
		for _, o := range os {
			l := RequestLine{Policy: label, SentMS: ms(o.sent.Sub(r.start)), Prefix: fmt.Sprintf("%016x", o.head),
				Worker: o.worker, TTFTMS: ms(o.ttft), E2EMS: ms(o.e2e), Prompt: o.prompt, Cached: o.cached, Oracle: o.oracle}
			if o.err != nil {
				l.Error = o.err.Error()
			}
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
	}
	return nil
}
