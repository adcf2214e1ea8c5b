package openai

import (
	"net/http"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// chat serves POST /v1/chat/completions through Router.Chat.
func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	ctx, rc, preq, release, ok := prepare(h, w, r, &req, (*chatRequest).proto)
	if !ok {
		return
	}
	defer release()
	st, err := rc.Chat(ctx, preq)
	if err != nil {
		writeError(w, err)
		return
	}
	recv := func() (answer, error) { return st.Recv() }
	out := chatOut{model: modelName(req.Model), created: h.now().Unix(), usage: req.StreamOptions.IncludeUsage, logprobs: req.Logprobs}
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
	writeJSON(w, http.StatusOK, out.completion(m.GetRequestId(), c))
}

// chatOut shapes Chat's answers as OpenAI's chat completion objects.
type chatOut struct {
	model    string
	created  int64
	usage    bool // stream_options.include_usage
	logprobs bool
	started  bool // the first chunk, carrying the role, was sent
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *assistant    `json:"message,omitempty"`
	Delta        *assistant    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// assistant is a message (non-streamed) or a delta (streamed).
type assistant struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
}

type toolCallOut struct {
	Index    *uint32 `json:"index,omitempty"` // deltas only
	ID       string  `json:"id,omitempty"`
	Type     string  `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens        uint32 `json:"prompt_tokens"`
	CompletionTokens    uint32 `json:"completion_tokens"`
	TotalTokens         uint32 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens uint32 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(u *kvgatev1.Usage) *usage {
	out := &usage{PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens(), TotalTokens: u.GetPromptTokens() + u.GetCompletionTokens()}
	out.PromptTokensDetails.CachedTokens = u.GetCachedTokens()
	return out
}

// finishReason is OpenAI's name for why a generation ended.
func finishReason(f kvgatev1.FinishReason) *string {
	s := "stop"
	switch f {
	case kvgatev1.FinishReason_FINISH_REASON_LENGTH:
		s = "length"
	case kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS:
		s = "tool_calls"
	case kvgatev1.FinishReason_FINISH_REASON_ABORT:
		s = "abort"
	}
	return &s
}

func (o *chatOut) object(id string, choices []chatChoice) chatCompletion {
	return chatCompletion{ID: "chatcmpl-" + id, Object: "chat.completion.chunk", Created: o.created, Model: o.model, Choices: choices}
}

func (o *chatOut) chunk(id string, c *kvgatev1.GenerateChunk) []any {
	d := &assistant{}
	if !o.started {
		o.started = true
		d.Role = "assistant"
		empty := ""
		d.Content = &empty
	}
	if c.GetText() != "" {
		t := c.GetText()
		d.Content = &t
	}
	if c.GetReasoningContent() != "" {
		t := c.GetReasoningContent()
		d.ReasoningContent = &t
	}
	for _, tc := range c.GetToolCalls() {
		if tc.GetInvalid() {
			continue // OpenAI's deltas cannot retract a call; its raw text follows as content
		}
		idx := tc.GetIndex()
		out := toolCallOut{Index: &idx, ID: tc.GetId()}
		if tc.GetName() != "" {
			out.Type = "function"
		}
		out.Function.Name, out.Function.Arguments = tc.GetName(), tc.GetArguments()
		d.ToolCalls = append(d.ToolCalls, out)
	}
	var lp *chatLogprobs
	if o.logprobs && len(c.GetLogprobs()) > 0 {
		lp = chatLogprobsOf(c.GetLogprobs())
	}
	if d.Role == "" && d.Content == nil && d.ReasoningContent == nil && d.ToolCalls == nil && lp == nil {
		return nil // held back (a possible stop string): nothing new to say
	}
	return []any{o.object(id, []chatChoice{{Delta: d, Logprobs: lp}})}
}

func (o *chatOut) complete(id string, c *kvgatev1.GenerateComplete) []any {
	var out []any
	if !o.started {
		out = append(out, o.chunk(id, &kvgatev1.GenerateChunk{})...)
	}
	out = append(out, o.object(id, []chatChoice{{Delta: &assistant{}, FinishReason: finishReason(c.GetFinishReason())}}))
	if o.usage {
		last := o.object(id, []chatChoice{})
		last.Usage = usageOf(c.GetUsage())
		out = append(out, last)
	}
	return out
}

// completion is the whole answer, for stream=false.
func (o *chatOut) completion(id string, c *kvgatev1.GenerateComplete) chatCompletion {
	msg := &assistant{Role: "assistant"}
	if c.GetText() != "" || len(c.GetToolCalls()) == 0 {
		t := c.GetText()
		msg.Content = &t
	}
	if c.GetReasoningContent() != "" {
		t := c.GetReasoningContent()
		msg.ReasoningContent = &t
	}
	for _, tc := range c.GetToolCalls() {
		out := toolCallOut{ID: tc.GetId(), Type: "function"}
		out.Function.Name = tc.GetFunction().GetName()
		args, _ := tc.GetFunction().GetArguments().MarshalJSON()
		if tc.GetFunction().GetArguments() == nil {
			args = []byte("{}")
		}
		out.Function.Arguments = string(args)
		msg.ToolCalls = append(msg.ToolCalls, out)
	}
	var lp *chatLogprobs
	if o.logprobs {
		lp = chatLogprobsOf(c.GetLogprobs())
	}
	cc := chatCompletion{ID: "chatcmpl-" + id, Object: "chat.completion", Created: o.created, Model: o.model,
		Choices: []chatChoice{{Message: msg, Logprobs: lp, FinishReason: finishReason(c.GetFinishReason())}}, Usage: usageOf(c.GetUsage())}
	return cc
}

// chatLogprobs is OpenAI's choice.logprobs of a chat completion.
type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
}

type tokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func chatLogprobsOf(lps []*kvgatev1.TokenLogprob) *chatLogprobs {
	out := &chatLogprobs{Content: []tokenLogprob{}}
	for _, lp := range lps {
		t := tokenLogprob{Token: lp.GetToken(), Logprob: lp.GetLogprob(), Bytes: bytesOf(lp.GetToken()), TopLogprobs: []topLogprob{}}
		for _, top := range lp.GetTopLogprobs() {
			t.TopLogprobs = append(t.TopLogprobs, topLogprob{Token: top.GetToken(), Logprob: top.GetLogprob(), Bytes: bytesOf(top.GetToken())})
		}
		out.Content = append(out.Content, t)
	}
	return out
}

func bytesOf(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}
