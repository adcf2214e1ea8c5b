package sim

// Structured output. A request constrained by a JSON schema (SGLang's and
// vLLM's json_schema) is answered with the schema's minimal instance (see
// jsonschema.go), tokenized with the served tokenizer and emitted like a
// scripted answer: streamed, then EOS, cut by the request's token limit like
// any answer. vLLM's json_object is answered with {}. The other constraint
// kinds (regex, EBNF grammar, structural tag, vLLM's choice) are accepted and
// ignored: the answer is sampled as without them. A schema the simulator
// cannot instantiate is refused with INVALID_ARGUMENT, as an engine refuses
// a schema its grammar backend cannot compile.

import (
	"sync"

	"github.com/kvgate/kvgate/tokenize"
)

// newEncoder returns the tokenizer structured answers are encoded with,
// built on first use; nil when the engine serves no tokenizer.
func newEncoder(tok *servedTokenizer) func() (*tokenize.Tokenizer, error) {
	if tok == nil {
		return nil
	}
	return sync.OnceValues(func() (*tokenize.Tokenizer, error) { return tokenize.FromJSON(tok.json, tok.config) })
}

// schemaAnswer is the answer to a json_schema constraint.
func (e *Engine) schemaAnswer(schema string) ([]uint32, error) {
	inst, err := schemaInstance([]byte(schema))
	if err != nil {
		return nil, e.invalid("json_schema: %v", err)
	}
	return e.encodeAnswer(string(inst))
}

// encodeAnswer tokenizes a structured answer.
func (e *Engine) encodeAnswer(text string) ([]uint32, error) {
	if e.encoder == nil {
		return nil, e.invalid("structured output needs a tokenizer to write its answer, and this engine serves none (TokenizerDir \"none\")")
	}
	tok, err := e.encoder()
	if err != nil {
		return nil, e.invalid("structured output: the served tokenizer: %v", err)
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		return nil, e.invalid("structured output: encoding the answer: %v", err)
	}
	for i, id := range ids {
		if int(id) >= e.cfg.VocabSize {
			return nil, e.invalid("structured output: answer token %d is id %d, beyond the vocabulary (%d)", i, id, e.cfg.VocabSize)
		}
	}
	return ids, nil
}
