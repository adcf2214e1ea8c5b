package sim

// A client for the log-probability and structured-output tests: one request
// with those fields set, in either protocol, its answer decoded back into the
// simulator's neutral terms.

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

type lpReq struct {
	prompt         []uint32
	maxNew         uint32
	noStream       bool
	output, inPrmt bool
	topK           int32
	startLen       *int32 // SGLang's logprob_start_len, when not the usual
	schema         string // json_schema
	regex          string
	jsonObject     bool // vLLM only
	// PD: SGLang's disaggregated_params or vLLM's kv_transfer_params_json.
	sgDisagg *sglang.DisaggregatedParams
	kvJSON   string
}

// reqID is a request id for t, usable as a vLLM room name in a URL path.
func reqID(t *testing.T) string { return strings.ReplaceAll(t.Name(), "/", "_") }

type lpChunk struct {
	tokens           []uint32
	logprobs, prompt []tokenLogprob
}

type lpResult struct {
	chunks                []lpChunk
	outputIDs             []uint32
	finish                string
	finalOut, finalPrompt []tokenLogprob
	kvJSON                string
	err                   error
}

func (r lpResult) streamedLogprobs() []tokenLogprob {
	var out []tokenLogprob
	for _, c := range r.chunks {
		out = append(out, c.logprobs...)
	}
	return out
}

// runLP sends q to the engine srv serves and collects the answer.
func runLP(t *testing.T, srv *Process, q lpReq) lpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := testutil.Dial(t, srv.Addr())
	var res lpResult
	if srv.Engine().Config().Protocol == ProtocolSGLang {
		sp := &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: &q.maxNew}
		switch {
		case q.schema != "":
			sp.Constraint = &sglang.SamplingParams_JsonSchema{JsonSchema: q.schema}
		case q.regex != "":
			sp.Constraint = &sglang.SamplingParams_Regex{Regex: q.regex}
		}
		m := &sglang.GenerateRequest{RequestId: reqID(t), Tokenized: &sglang.TokenizedInput{InputIds: q.prompt},
			SamplingParams: sp, Stream: !q.noStream, DisaggregatedParams: q.sgDisagg}
		if q.output || q.inPrmt {
			m.ReturnLogprob, m.TopLogprobsNum, m.LogprobStartLen = true, q.topK, -1
			if q.inPrmt {
				m.LogprobStartLen = 0
			}
		}
		if q.startLen != nil {
			m.LogprobStartLen = *q.startLen
		}
		st, err := sglang.NewSglangSchedulerClient(conn).Generate(ctx, m)
		if err != nil {
			return lpResult{err: err}
		}
		for {
			r, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return res
			}
			if err != nil {
				res.err = err
				return res
			}
			if ch := r.GetChunk(); ch != nil {
				res.chunks = append(res.chunks, lpChunk{ch.GetTokenIds(), sgOut(ch.GetOutputLogprobs()), sgIn(ch.GetInputLogprobs())})
				continue
			}
			c := r.GetComplete()
			res.outputIDs, res.finish = c.GetOutputIds(), c.GetFinishReason()
			res.finalOut, res.finalPrompt = sgOut(c.GetOutputLogprobs()), sgIn(c.GetInputLogprobs())
		}
	}
	sp := &vllm.SamplingParams{MaxTokens: &q.maxNew}
	switch {
	case q.schema != "":
		sp.Constraint = &vllm.SamplingParams_JsonSchema{JsonSchema: q.schema}
	case q.regex != "":
		sp.Constraint = &vllm.SamplingParams_Regex{Regex: q.regex}
	case q.jsonObject:
		sp.Constraint = &vllm.SamplingParams_JsonObject{JsonObject: true}
	}
	if q.output {
		sp.Logprobs = &q.topK
	}
	if q.inPrmt {
		sp.PromptLogprobs = &q.topK
	}
	m := &vllm.GenerateRequest{RequestId: reqID(t), Input: &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: q.prompt}},
		SamplingParams: sp, Stream: !q.noStream}
	if q.kvJSON != "" {
		m.KvTransferParamsJson = &q.kvJSON
	}
	st, err := vllm.NewVllmEngineClient(conn).Generate(ctx, m)
	if err != nil {
		return lpResult{err: err}
	}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return res
		}
		if err != nil {
			res.err = err
			return res
		}
		if ch := r.GetChunk(); ch != nil {
			res.chunks = append(res.chunks, lpChunk{ch.GetTokenIds(), vlOut(ch.GetOutputLogprobs()), vlIn(ch.GetInputLogprobs())})
			continue
		}
		c := r.GetComplete()
		res.outputIDs, res.finish, res.kvJSON = c.GetOutputIds(), c.GetFinishReason(), c.GetKvTransferParamsJson()
		res.finalOut, res.finalPrompt = vlOut(c.GetOutputLogprobs()), vlIn(c.GetInputLogprobs())
	}
}

type topMsg interface {
	GetValues() []float32
	GetTokenIds() []uint32
}

// decodeLPs reads parallel arrays back into tokenLogprob, value unwrapping
// each entry (ok false: no value). A missing id shows as 1<<31, so a test
// comparing ids sees arrays that do not line up.
func decodeLPs[V any, T topMsg](vals []V, ids []uint32, tops []T, value func(V) (float32, bool)) []tokenLogprob {
	idAt := func(ids []uint32, i int) uint32 {
		if i < len(ids) {
			return ids[i]
		}
		return 1 << 31
	}
	var out []tokenLogprob
	for i, w := range vals {
		v, ok := value(w)
		lp := tokenLogprob{id: idAt(ids, i), value: v, missing: !ok}
		if len(tops) > 0 {
			for j, tv := range tops[i].GetValues() {
				lp.top = append(lp.top, altLogprob{id: idAt(tops[i].GetTokenIds(), j), value: tv})
			}
		}
		out = append(out, lp)
	}
	return out
}

func plain(v float32) (float32, bool) { return v, true }

func sgOut(m *sglang.OutputLogProbs) []tokenLogprob {
	return decodeLPs(m.GetTokenLogprobs(), m.GetTokenIds(), m.GetTopLogprobs(), plain)
}

func sgIn(m *sglang.InputLogProbs) []tokenLogprob {
	return decodeLPs(m.GetTokenLogprobs(), m.GetTokenIds(), m.GetTopLogprobs(),
		func(v *sglang.InputTokenLogProb) (float32, bool) { return v.GetValue(), v.Value != nil })
}

func vlOut(m *vllm.OutputLogProbs) []tokenLogprob {
	return decodeLPs(m.GetTokenLogprobs(), m.GetTokenIds(), m.GetTopLogprobs(), plain)
}

func vlIn(m *vllm.InputLogProbs) []tokenLogprob {
	return decodeLPs(m.GetTokenLogprobs(), m.GetTokenIds(), m.GetTopLogprobs(),
		func(v *vllm.InputTokenLogProb) (float32, bool) { return v.GetValue(), v.Value != nil })
}
