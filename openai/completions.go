package openai

import (
	"net/http"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// completionRequest is POST /v1/completions' body.
type completionRequest struct {
	sampling
	Prompt   *completionPrompt `json:"prompt"`
	Logprobs *uint32           `json:"logprobs"`
	Echo     bool              `json:"echo"`
	Suffix   *string           `json:"suffix"`
	BestOf   *int              `json:"best_of"`
}

// proto translates the request into kvgate's GenerateRequest.
func (c *completionRequest) proto() (*kvgatev1.GenerateRequest, error) {
	switch {
	case c.Prompt == nil:
		return nil, invalidParam("prompt", "prompt is required: a string or a list of token ids")
	case c.Prompt.count() != 1:
		return nil, invalidParam("prompt", "prompt holds %d prompts; kvgate takes one per request (a string or a list of token ids): send one request per prompt", c.Prompt.count())
	case c.Echo:
		return nil, invalidParam("echo", "echo is not supported")
	case c.Suffix != nil && *c.Suffix != "":
		return nil, invalidParam("suffix", "suffix is not supported")
	case c.BestOf != nil && *c.BestOf != 1:
		return nil, invalidParam("best_of", "best_of must be 1")
	}
	sp, err := c.params(c.MaxTokens)
	if err != nil {
		return nil, err
	}
	if c.Logprobs != nil {
		sp.Logprobs, sp.TopLogprobs = true, *c.Logprobs
	}
	req := &kvgatev1.GenerateRequest{Model: c.Model, Stream: c.Stream, SamplingParams: sp}
	if len(c.Prompt.ids) == 1 {
		req.InputIds = c.Prompt.ids[0]
	} else {
		req.Text = c.Prompt.texts[0]
	}
	return req, nil
}

// completions serves POST /v1/completions through Router.Generate.
func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	ctx, rc, preq, release, ok := prepare(h, w, r, &req, (*completionRequest).proto)
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
	out := textOut{model: modelName(req.Model), created: h.now().Unix(), usage: req.StreamOptions.IncludeUsage, logprobs: req.Logprobs != nil}
	if req.Stream {
		h.relay(w, r, recv, &out)
		return
	}
	m, c, err := final(recv)
	if err != nil {
		writeError(w, err)
		return
	}
	setRequestID(w, r, m.GetRequestId())
	body := out.object(m.GetRequestId(), textChoice{Text: c.GetText(), Logprobs: out.logprobsOf(c.GetLogprobs()), FinishReason: finishReason(c.GetFinishReason())})
	body.Usage = usageOf(c.GetUsage())
	writeJSON(w, http.StatusOK, body)
}

// textOut shapes Generate's answers as OpenAI's text completion objects.
type textOut struct {
	model    string
	created  int64
	usage    bool
	logprobs bool
}

type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type textChoice struct {
	Index        int           `json:"index"`
	Text         string        `json:"text"`
	Logprobs     *textLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// textLogprobs is the legacy completions' logprobs object.
type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

func (o *textOut) logprobsOf(lps []*kvgatev1.TokenLogprob) *textLogprobs {
	if !o.logprobs {
		return nil
	}
	out := &textLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, lp.GetToken())
		out.TokenLogprobs = append(out.TokenLogprobs, lp.GetLogprob())
		top := map[string]float32{}
		for _, t := range lp.GetTopLogprobs() {
			top[t.GetToken()] = t.GetLogprob()
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
}

func (o *textOut) object(id string, choices ...textChoice) textCompletion {
	return textCompletion{ID: "cmpl-" + id, Object: "text_completion", Created: o.created, Model: o.model, Choices: choices}
}

func (o *textOut) chunk(id string, c *kvgatev1.GenerateChunk) []any {
	if c.GetText() == "" && !(o.logprobs && len(c.GetLogprobs()) > 0) {
		return nil
	}
	return []any{o.object(id, textChoice{Text: c.GetText(), Logprobs: o.logprobsOf(c.GetLogprobs())})}
}

func (o *textOut) complete(id string, c *kvgatev1.GenerateComplete) []any {
	out := []any{o.object(id, textChoice{FinishReason: finishReason(c.GetFinishReason())})}
	if o.usage {
		last := o.object(id)
		last.Choices = []textChoice{}
		last.Usage = usageOf(c.GetUsage())
		out = append(out, last)
	}
	return out
}
