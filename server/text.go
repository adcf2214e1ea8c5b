package server

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// noTokenizer explains what to configure when a request needs text and the
// router has no tokenizer.
func noTokenizer(field string) string {
	return field + " needs a tokenizer, and kvgate has none: start it with --model-path or --tokenizer-path, " +
		"or with workers that serve their tokenizer through GetTokenizer"
}

// generateJob turns a Generate request into a job: the prompt is its token
// ids, or its text tokenized with the model's special tokens added.
func (s *Server) generateJob(ctx context.Context, req *kvgatev1.GenerateRequest) (*job, error) {
	j, err := newJob(ctx, req.GetRequestId(), req.GetSamplingParams(), req.GetStream())
	if err != nil {
		return nil, err
	}
	j.task = &generation{s: s.pipeline, j: j}
	if j.route, err = s.route(req.GetModel()); err != nil {
		return nil, err
	}
	text := j.route.Text
	if len(j.sampling.GetStop()) > 0 && text == nil {
		return nil, noText(j.route, "sampling_params.stop")
	}
	switch prompt := req.GetText(); {
	case len(req.GetInputIds()) > 0 && prompt != "":
		return nil, invalid("input_ids and text are both set; send the prompt one way")
	case len(req.GetInputIds()) > 0:
		j.inputIDs = req.GetInputIds()
	case prompt != "":
		if text == nil {
			return nil, noText(j.route, "text")
		}
		_, span := s.startStep(ctx, "kvgate.tokenize")
		var lk cache.Lookup
		j.inputIDs, j.commit, lk, err = encode(text, prompt, true, "text", s.promptContext(j.route))
		endTokenize(span, lk, len(j.inputIDs), err)
		if err != nil {
			return nil, err
		}
	default:
		return nil, invalid("input_ids is empty and text is empty; a prompt of at least 1 token is required")
	}
	return j, nil
}

// chatJob renders a conversation with the model's chat template and tokenizes
// it. As in transformers, the template places any special tokens itself, so
// the tokenizer adds none.
func (s *Server) chatJob(ctx context.Context, req *kvgatev1.ChatRequest) (*job, error) {
	j, err := newJob(ctx, req.GetRequestId(), req.GetSamplingParams(), req.GetStream())
	if err != nil {
		return nil, err
	}
	j.task = &generation{s: s.pipeline, j: j}
	if j.route, err = s.route(req.GetModel()); err != nil {
		return nil, err
	}
	text := j.route.Text
	if text == nil {
		return nil, noText(j.route, "Chat")
	}
	if !text.HasChatTemplate() {
		return nil, status.Error(codes.FailedPrecondition,
			"the model has no chat template: give one with --chat-template, or send text to Generate")
	}
	if len(req.GetMessages()) == 0 {
		return nil, invalid("messages is empty; a conversation of at least 1 message is required")
	}
	if n, limit := len(req.GetMessages()), s.admission.cfg.MaxChatMessages; n > limit {
		return nil, invalid("messages has %d entries; the limit is %d", n, limit)
	}
	if n, limit := len(req.GetTools()), s.admission.cfg.MaxTools; n > limit {
		return nil, invalid("tools has %d entries; the limit is %d", n, limit)
	}
	_, span := s.startStep(ctx, "kvgate.chat_template")
	conv, err := conversation(req)
	if err != nil {
		endSpan(span, err)
		span.End()
		return nil, err
	}
	// Rendered and tokenized in one step, so that client text can be kept
	// from becoming control tokens (--split-special-tokens-in-content):
	// the span covers both.
	var lk cache.Lookup
	contextLen := s.promptContext(j.route)
	j.inputIDs, j.commit, lk, err = text.EncodeChatLimit(conv, promptLimit(contextLen))
	defer func() { endTokenize(span, lk, len(j.inputIDs), err) }()
	switch {
	case errors.Is(err, tokenize.ErrTooManyTokens):
		err = invalid("the rendered conversation has more than %d tokens; the model's context is %d tokens and at least 1 must remain for output",
			promptLimit(contextLen), contextLen)
	case errors.Is(err, template.ErrTemplateRaised):
		err = invalid("the chat template rejected the conversation: %v", err)
	case errors.Is(err, textmodel.ErrProtectedTextAltered):
		err = invalid("the conversation cannot be rendered with its special-token text kept as text: %v", err)
	case err != nil:
		err = invalid("the chat template cannot render or tokenize the conversation: %v", err)
	}
	if err != nil {
		return nil, err
	}
	if j.reasoning, err = s.reasoningFor(j, req.ReasoningParser); err != nil {
		return nil, err
	}
	if err := s.chatTools(j, req); err != nil {
		return nil, err
	}
	return j, nil
}

// encode tokenizes a prompt through the caches; commit caches it, which the
// pipeline does only once the request proved valid. lk says how the caches
// served it, for the request's trace. contextLen, when known (> 0), bounds
// the work: a text is tokenized only until it is known not to fit, so that
// a text of megabytes costs memory in proportion to the context, not to its
// length.
func encode(tm *textmodel.Model, text string, addSpecial bool, what string, contextLen int) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	if !utf8.ValidString(text) {
		return nil, nil, lk, invalid("%s is not valid UTF-8", what)
	}
	limit := promptLimit(contextLen)
	ids, commit, lk, err = tm.EncodeDeferredLimit(text, addSpecial, limit)
	if errors.Is(err, tokenize.ErrTooManyTokens) {
		return nil, nil, lk, invalid("%s has more than %d tokens; the model's context is %d tokens and at least 1 must remain for output", what, limit, contextLen)
	}
	if err != nil {
		return nil, nil, lk, invalid("tokenizing %s: %v", what, err)
	}
	return ids, commit, lk, nil
}

// promptLimit is the most tokens a prompt may have in a context of
// contextLen tokens (0: unknown, no limit): at least 1 must remain for
// output.
func promptLimit(contextLen int) int { return max(contextLen-1, 0) }

// promptContext is the largest context among the route's healthy workers:
// a prompt longer than that fits none of them. 0 when it is unknown (a
// healthy worker does not report its context, or none is healthy).
func (s *Server) promptContext(r *route) int {
	largest := 0
	for _, w := range s.reg.Current().Workers {
		if !r.Serves(w) || !w.Healthy() {
			continue
		}
		c := w.Info().MaxContextLength
		if c <= 0 {
			return 0
		}
		largest = max(largest, c)
	}
	return largest
}

// conversation converts the request to the values a chat template sees:
// messages and tools as ordered maps, JSON fields as jsonvalues.go converts
// them (keys sorted, since a Struct has no order and templates print them
// with tojson).
func conversation(req *kvgatev1.ChatRequest) (textmodel.Conversation, error) {
	c := textmodel.Conversation{AddGenerationPrompt: req.AddGenerationPrompt == nil || *req.AddGenerationPrompt}
	for i, m := range req.GetMessages() {
		msg := template.NewOrderedMap()
		msg.Set("role", m.GetRole())
		msg.Set("content", m.GetContent())
		if m.GetName() != "" {
			msg.Set("name", m.GetName())
		}
		if len(m.GetToolCalls()) > 0 {
			var calls []any
			for k, tc := range m.GetToolCalls() {
				fn := template.NewOrderedMap()
				fn.Set("name", tc.GetFunction().GetName())
				args, err := argumentsValue(tc.GetFunction().GetArguments(), fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, k))
				if err != nil {
					return c, err
				}
				fn.Set("arguments", args)
				call := template.NewOrderedMap()
				if tc.GetId() != "" {
					call.Set("id", tc.GetId())
				}
				call.Set("type", orDefault(tc.GetType(), "function"))
				call.Set("function", fn)
				calls = append(calls, call)
			}
			msg.Set("tool_calls", calls)
		}
		if m.GetToolCallId() != "" {
			msg.Set("tool_call_id", m.GetToolCallId())
		}
		if m.GetReasoningContent() != "" {
			msg.Set("reasoning_content", m.GetReasoningContent())
		}
		c.Messages = append(c.Messages, msg)
	}
	for i, t := range req.GetTools() {
		fn := template.NewOrderedMap()
		fn.Set("name", t.GetFunction().GetName())
		if d := t.GetFunction().GetDescription(); d != "" {
			fn.Set("description", d)
		}
		if p := t.GetFunction().GetParameters(); p != nil {
			params, err := structValue(p, fmt.Sprintf("tools[%d].function.parameters", i))
			if err != nil {
				return c, err
			}
			fn.Set("parameters", params)
		}
		tool := template.NewOrderedMap()
		tool.Set("type", orDefault(t.GetType(), "function"))
		tool.Set("function", fn)
		c.Tools = append(c.Tools, tool)
	}
	if kw := req.GetChatTemplateKwargs(); kw != nil {
		m, err := structValue(kw, "chat_template_kwargs")
		if err != nil {
			return c, err
		}
		c.Kwargs = m
	}
	return c, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// endTokenize ends a tokenization span with the prompt's length and the
// cache that served this prompt: "l0" (the whole text), "l1" (a prefix at
// a special-token boundary), or "miss".
func endTokenize(span trace.Span, lk cache.Lookup, tokens int, err error) {
	hit := "miss"
	switch {
	case lk.L0Hit:
		hit = "l0"
	case lk.L1HitBytes > 0:
		hit = "l1"
	}
	endTokenizeAs(span, hit, tokens, err)
}

// endTokenizeAs ends a tokenization span with the prompt's length and the
// cache label given.
func endTokenizeAs(span trace.Span, hit string, tokens int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrPromptTokens.Int(tokens), attrTokenizeCache.String(hit))
		endSpan(span, err)
	}
	span.End()
}
