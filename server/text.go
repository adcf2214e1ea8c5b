package server

import (
	"context"
	"errors"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
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
func (s *Server) generateJob(ctx context.Context, req *kvgatev1.GenerateRequest) (*pipeline.Job, error) {
	j, err := newJob(ctx, req.GetRequestId(), req.GetSamplingParams(), req.GetStream())
	if err != nil {
		return nil, err
	}
	j.Task = s.pipe.Generation(j)
	if j.Route, err = s.route(req.GetModel()); err != nil {
		return nil, err
	}
	text := j.Route.Text
	if len(j.Sampling.GetStop()) > 0 && text == nil {
		return nil, noText(j.Route, "sampling_params.stop")
	}
	switch prompt := req.GetText(); {
	case len(req.GetInputIds()) > 0 && prompt != "":
		return nil, fault.Invalidf("text", "input_ids and text are both set; send the prompt one way")
	case len(req.GetInputIds()) > 0:
		j.InputIDs = req.GetInputIds()
	case prompt != "":
		if text == nil {
			return nil, noText(j.Route, "text")
		}
		_, span := s.startStep(ctx, "kvgate.tokenize")
		var lk cache.Lookup
		j.InputIDs, j.Commit, lk, err = encode(text, prompt, true, "text", s.promptContext(j.Route))
		endTokenize(span, lk, len(j.InputIDs), err)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fault.Invalidf("input_ids", "input_ids is empty and text is empty; a prompt of at least 1 token is required")
	}
	return j, nil
}

// chatJob renders a conversation with the model's chat template and tokenizes
// it. As in transformers, the template places any special tokens itself, so
// the tokenizer adds none.
func (s *Server) chatJob(ctx context.Context, req *kvgatev1.ChatRequest) (*pipeline.Job, error) {
	j, err := newJob(ctx, req.GetRequestId(), req.GetSamplingParams(), req.GetStream())
	if err != nil {
		return nil, err
	}
	j.Task = s.pipe.Generation(j)
	if j.Route, err = s.route(req.GetModel()); err != nil {
		return nil, err
	}
	text := j.Route.Text
	if text == nil {
		return nil, noText(j.Route, "Chat")
	}
	if !text.HasChatTemplate() {
		return nil, fault.Newf(fault.Precondition,
			"the model has no chat template: give one with --chat-template, or send text to Generate")
	}
	if len(req.GetMessages()) == 0 {
		return nil, fault.Invalidf("messages", "messages is empty; a conversation of at least 1 message is required")
	}
	if n, limit := len(req.GetMessages()), s.admission.cfg.MaxChatMessages; n > limit {
		return nil, fault.Invalidf("messages", "messages has %d entries; the limit is %d", n, limit)
	}
	if n, limit := len(req.GetTools()), s.admission.cfg.MaxTools; n > limit {
		return nil, fault.Invalidf("tools", "tools has %d entries; the limit is %d", n, limit)
	}
	// The cheap checks first: a request refused for its fields costs no
	// rendering and no tokenizing.
	_, span := s.startStep(ctx, "kvgate.chat_template")
	conv, err := answer.Conversation(req)
	if err == nil {
		j.Answer, err = answer.New(req, j.ID, s.answerModel(j.Route))
	}
	if err != nil {
		endSpan(span, err)
		span.End()
		return nil, err
	}
	// Rendered and tokenized in one step, so that client text can be kept
	// from becoming control tokens (--split-special-tokens-in-content):
	// the span covers both.
	var lk cache.Lookup
	contextLen := s.promptContext(j.Route)
	j.InputIDs, j.Commit, lk, err = text.EncodeChatLimit(conv, promptLimit(contextLen))
	defer func() { endTokenize(span, lk, len(j.InputIDs), err) }()
	switch {
	case errors.Is(err, tokenize.ErrTooManyTokens):
		err = fault.Invalidf("messages", "the rendered conversation has more than %d tokens; the model's context is %d tokens and at least 1 must remain for output",
			promptLimit(contextLen), contextLen)
	case errors.Is(err, template.ErrTemplateRaised):
		err = fault.Invalidf("messages", "the chat template rejected the conversation: %v", err)
	case errors.Is(err, textmodel.ErrProtectedTextAltered):
		err = fault.Invalidf("messages", "the conversation cannot be rendered with its special-token text kept as text: %v", err)
	case err != nil:
		err = fault.Invalidf("messages", "the chat template cannot render or tokenize the conversation: %v", err)
	}
	if err != nil {
		return nil, err
	}
	j.Answer.SawPrompt(j.InputIDs, func(ids []uint32) string {
		tail, _ := text.Tokenizer().Decode(ids, false)
		return tail
	})
	return j, nil
}

// answerModel is what reading a Chat's answer on r needs to know of its
// model and of the router's parsers.
func (s *Server) answerModel(r *route) answer.Rules {
	tok := r.Text.Tokenizer()
	return answer.Rules{
		ReasoningParser:    s.reasoningParser,
		ToolCallParser:     s.toolCallParser,
		Thinks:             r.Thinks,
		ToolFormat:         r.ToolFormat,
		ToolFormatDetected: r.ToolFormatDetected,
		SpecialID: func(text string) (uint32, bool) {
			id, ok := tok.TokenToID(text)
			return id, ok && tok.IsSpecial(id)
		},
	}
}

// encode tokenizes a prompt through the caches; commit caches it, which the
// pipeline does only once the request proved valid. lk says how the caches
// served it, for the request's trace. contextLen, when known (> 0), bounds
// the work: a text is tokenized only until it is known not to fit, so that
// a text of megabytes costs memory in proportion to the context, not to its
// length.
func encode(tm *textmodel.Model, text string, addSpecial bool, what string, contextLen int) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	if !utf8.ValidString(text) {
		return nil, nil, lk, fault.Invalidf(what, "%s is not valid UTF-8", what)
	}
	limit := promptLimit(contextLen)
	ids, commit, lk, err = tm.EncodeDeferredLimit(text, addSpecial, limit)
	if errors.Is(err, tokenize.ErrTooManyTokens) {
		return nil, nil, lk, fault.Invalidf(what, "%s has more than %d tokens; the model's context is %d tokens and at least 1 must remain for output", what, limit, contextLen)
	}
	if err != nil {
		return nil, nil, lk, fault.Invalidf(what, "tokenizing %s: %v", what, err)
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
