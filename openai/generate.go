package openai

import (
	"encoding/json"
	"net/http"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// generateRequest is SGLang's native POST /generate body, as
// reinforcement-learning frameworks send it: one prompt as text or token
// ids, SGLang's sampling_params, and optional log-probabilities.
type generateRequest struct {
	Text           *string          `json:"text"`
	InputIDs       json.RawMessage  `json:"input_ids"`
	SamplingParams sglangParams     `json:"sampling_params"`
	Stream         bool             `json:"stream"`
	ReturnLogprob  bool             `json:"return_logprob"`
	TopLogprobsNum uint32           `json:"top_logprobs_num"`
	RID            *json.RawMessage `json:"rid"`
	Model          string           `json:"model"`
}

// sglangParams is SGLang's sampling_params object.
type sglangParams struct {
	MaxNewTokens      *uint32  `json:"max_new_tokens"`
	MinNewTokens      uint32   `json:"min_new_tokens"`
	Temperature       *float32 `json:"temperature"`
	TopP              *float32 `json:"top_p"`
	TopK              *int32   `json:"top_k"`
	MinP              *float32 `json:"min_p"`
	FrequencyPenalty  *float32 `json:"frequency_penalty"`
	PresencePenalty   *float32 `json:"presence_penalty"`
	RepetitionPenalty *float32 `json:"repetition_penalty"`
	Stop              stopList `json:"stop"`
	StopTokenIDs      []uint32 `json:"stop_token_ids"`
	IgnoreEOS         bool     `json:"ignore_eos"`
	SkipSpecialTokens *bool    `json:"skip_special_tokens"`
	NoStopTrim        bool     `json:"no_stop_trim"`
	JSONSchema        *string  `json:"json_schema"`
	Regex             *string  `json:"regex"`
	EBNF              *string  `json:"ebnf"`
	N                 *int     `json:"n"`
	Seed              *int32   `json:"sampling_seed"`
}

func (g *generateRequest) proto() (*kvgatev1.GenerateRequest, error) {
	p := g.SamplingParams
	if p.N != nil && *p.N != 1 {
		return nil, invalidParam("sampling_params.n", "sampling_params.n is %d; kvgate generates one output per request, so it must be 1", *p.N)
	}
	sp := &kvgatev1.SamplingParams{
		MaxNewTokens: p.MaxNewTokens, MinNewTokens: p.MinNewTokens, Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MinP: p.MinP,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty, RepetitionPenalty: p.RepetitionPenalty,
		Stop: p.Stop, StopTokenIds: p.StopTokenIDs, IgnoreEos: p.IgnoreEOS, SkipSpecialTokens: p.SkipSpecialTokens, NoStopTrim: p.NoStopTrim,
		Seed: p.Seed, Logprobs: g.ReturnLogprob,
	}
	if g.ReturnLogprob {
		sp.TopLogprobs = g.TopLogprobsNum
	}
	n := 0
	for _, c := range []*string{p.JSONSchema, p.Regex, p.EBNF} {
		if c != nil {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, invalidParam("sampling_params.json_schema", "give at most one of sampling_params.json_schema, regex and ebnf")
	case p.JSONSchema != nil:
		sp.Constraint = &kvgatev1.SamplingParams_JsonSchema{JsonSchema: *p.JSONSchema}
	case p.Regex != nil:
		sp.Constraint = &kvgatev1.SamplingParams_Regex{Regex: *p.Regex}
	case p.EBNF != nil:
		sp.Constraint = &kvgatev1.SamplingParams_Ebnf{Ebnf: *p.EBNF}
	}
	req := &kvgatev1.GenerateRequest{Model: g.Model, Stream: g.Stream, SamplingParams: sp}
	if g.RID != nil {
		var rid string
		if err := json.Unmarshal(*g.RID, &rid); err != nil {
			return nil, invalidParam("rid", "rid must be a string (kvgate takes one prompt per request)")
		}
		req.RequestId = rid
	}
	hasIDs := len(g.InputIDs) > 0 && !isNull(g.InputIDs)
	switch {
	case hasIDs && g.Text != nil:
		return nil, invalidParam("input_ids", "give one of text and input_ids, not both")
	case hasIDs:
		if err := json.Unmarshal(g.InputIDs, &req.InputIds); err != nil {
			var batch [][]uint32
			if json.Unmarshal(g.InputIDs, &batch) == nil {
				return nil, invalidParam("input_ids", "input_ids holds a batch of %d prompts; kvgate takes one per request: send one request per prompt", len(batch))
			}
			return nil, invalidParam("input_ids", "input_ids must be a list of token ids (integers ≥ 0)")
		}
	case g.Text != nil:
		req.Text = *g.Text
	default:
		return nil, invalidParam("text", "give text or input_ids")
	}
	return req, nil
}

// generateOut is SGLang's /generate answer.
type generateOut struct {
	Text      string   `json:"text"`
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  metaInfo `json:"meta_info"`
}

type metaInfo struct {
	ID                  string      `json:"id"`
	FinishReason        *finishInfo `json:"finish_reason"`
	PromptTokens        uint32      `json:"prompt_tokens"`
	CompletionTokens    uint32      `json:"completion_tokens"`
	CachedTokens        uint32      `json:"cached_tokens"`
	Worker              string      `json:"worker,omitempty"`
	OutputTokenLogprobs [][3]any    `json:"output_token_logprobs,omitempty"`
	OutputTopLogprobs   [][][3]any  `json:"output_top_logprobs,omitempty"`
}

// finishInfo is SGLang's finish_reason: {"type": "stop"|"length"|"abort",
// "matched": the stop token id or string}.
type finishInfo struct {
	Type    string `json:"type"`
	Matched any    `json:"matched,omitempty"`
}

// sglangStream accumulates a streamed /generate: SGLang's stream sends the
// text and output_ids so far in every event, not the increments.
type sglangStream struct {
	logprobs bool
	out      generateOut
}

func (s *sglangStream) chunk(id string, c *kvgatev1.GenerateChunk) []any {
	s.out.Text += c.GetText()
	s.out.OutputIDs = append(s.out.OutputIDs, c.GetTokenIds()...)
	s.out.MetaInfo.ID = id
	s.out.MetaInfo.CompletionTokens = uint32(len(s.out.OutputIDs))
	if s.logprobs {
		s.addLogprobs(c.GetLogprobs())
	}
	return []any{s.out}
}

func (s *sglangStream) complete(id string, c *kvgatev1.GenerateComplete) []any {
	s.fill(id, c)
	return []any{s.out}
}

// fill sets the final answer from the completion.
func (s *sglangStream) fill(id string, c *kvgatev1.GenerateComplete) {
	s.out.Text, s.out.OutputIDs = c.GetText(), c.GetOutputIds()
	if s.out.OutputIDs == nil {
		s.out.OutputIDs = []uint32{}
	}
	fr := &finishInfo{Type: *finishReason(c.GetFinishReason())}
	if fr.Type == "tool_calls" {
		fr.Type = "stop"
	}
	if c.MatchedStopTokenId != nil {
		fr.Matched = c.GetMatchedStopTokenId()
	} else if c.MatchedStopString != nil {
		fr.Matched = c.GetMatchedStopString()
	}
	u := c.GetUsage()
	s.out.MetaInfo = metaInfo{ID: id, FinishReason: fr, PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens(),
		CachedTokens: u.GetCachedTokens(), Worker: c.GetWorker()}
	if s.logprobs {
		s.addLogprobs(c.GetLogprobs())
	}
}

// addLogprobs appends SGLang's [logprob, token_id, text] triples.
func (s *sglangStream) addLogprobs(lps []*kvgatev1.TokenLogprob) {
	for _, lp := range lps {
		s.out.MetaInfo.OutputTokenLogprobs = append(s.out.MetaInfo.OutputTokenLogprobs, [3]any{lp.GetLogprob(), lp.GetTokenId(), nil})
		top := [][3]any{}
		for _, t := range lp.GetTopLogprobs() {
			top = append(top, [3]any{t.GetLogprob(), t.GetTokenId(), nil})
		}
		s.out.MetaInfo.OutputTopLogprobs = append(s.out.MetaInfo.OutputTopLogprobs, top)
	}
}

// generate serves SGLang's POST /generate through Router.Generate.
func (h *Handler) generate(w http.ResponseWriter, r *http.Request) {
	var req generateRequest
	ctx, rc, preq, release, ok := prepare(h, w, r, &req, (*generateRequest).proto)
	if !ok {
		return
	}
	defer release()
	st, err := rc.Generate(ctx, preq)
	if err != nil {
		writeError(w, err)
		return
	}
	recv := func() (answer, error) { return st.Recv() }
	out := &sglangStream{logprobs: req.ReturnLogprob}
	if req.Stream {
		h.relay(w, r, recv, out)
		return
	}
	m, c, err := final(recv)
	if err != nil {
		writeError(w, err)
		return
	}
	setRequestID(w, r, m.GetRequestId())
	out.fill(m.GetRequestId(), c)
	writeJSON(w, http.StatusOK, out.out)
}
