package pipeline

import (
	"strings"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
)

// TestValidateAgainstNamesTheField: a prompt checked against the workers'
// limits is refused with an invalid-request fault that names the field at
// fault, so that each front can point at it and the edge alone decides the
// wire code.
func TestValidateAgainstNamesTheField(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	small := limits{vocabSize: 100, maxContext: 10}
	tests := []struct {
		name  string
		err   error
		field string
		msg   string // a part of the message
	}{
		{"an empty prompt", validateAgainst(nil, nil, small), "input_ids", "is empty"},
		{"a token outside the vocabulary", validateAgainst([]uint32{1, 100}, nil, small),
			"input_ids[1]", "below the model's vocab_size 100"},
		{"a stop token outside the vocabulary",
			validateAgainst([]uint32{1}, &kvgatev1.SamplingParams{StopTokenIds: []uint32{7, 200}}, small),
			"sampling_params.stop_token_ids[1]", "below the model's vocab_size 100"},
		{"a prompt as long as the context", validateAgainst(make([]uint32, 10), nil, small),
			"input_ids", "the model's context is 10 tokens"},
		{"a prompt and max_new_tokens beyond the context",
			validateAgainst(make([]uint32, 8), &kvgatev1.SamplingParams{MaxNewTokens: u32(3)}, small),
			"sampling_params.max_new_tokens", "is 11"},
		{"an embedding input beyond the context",
			(&Embedding{inputs: [][]uint32{{1}, make([]uint32, 11)}}).check(small),
			"inputs[1]", "the model's context is 10 tokens"},
		{"a prompt longer than the engines accept",
			validateAgainst(make([]uint32, 7), nil, limits{maxContext: 10, maxInput: 6}),
			"input_ids", "the engines accept at most 6"},
		{"an embedding input longer than the engines accept",
			(&Embedding{inputs: [][]uint32{{1}, make([]uint32, 7), make([]uint32, 8)}}).check(limits{maxContext: 10, maxInput: 6}),
			"inputs[2]", "accept at most 7"},
		{"an embedding token outside the vocabulary",
			(&Embedding{inputs: [][]uint32{{1, 100}}}).check(small),
			"inputs[0].input_ids[1]", "below the model's vocab_size 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := fault.As(tt.err)
			if !ok || f.Kind != fault.Invalid || f.Field != tt.field || !strings.Contains(f.Msg, tt.msg) {
				t.Errorf("got %v (%+v); want an invalid-request fault about %s saying %q", tt.err, f, tt.field, tt.msg)
			}
		})
	}
}

// FuzzValidateAgainst feeds arbitrary prompts, stop ids, token counts and
// limits through the check against the workers' limits. It must never
// panic, every refusal must be an invalid-request fault naming its field,
// and what it accepts must be what the limits promise to engines.
func FuzzValidateAgainst(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{4, 5, 6, 7}, uint32(0), uint32(16), true, uint32(512), uint32(4096), uint32(0))
	f.Add([]byte{}, []byte{}, uint32(9), uint32(0), false, uint32(0), uint32(0), uint32(2))
	f.Add([]byte{255, 255, 255, 255}, []byte{9}, uint32(1<<31), uint32(1<<31), true, uint32(8), uint32(10), uint32(1))
	f.Fuzz(func(t *testing.T, stopIDs, ids []byte, minNew, maxNew uint32, setMax bool, vocab, maxCtx, maxIn uint32) {
		sp := &kvgatev1.SamplingParams{MinNewTokens: minNew, StopTokenIds: fuzzIDs(stopIDs, 1<<11)}
		if setMax {
			sp.MaxNewTokens = &maxNew
		}
		prompt := fuzzIDs(ids, 1<<12)
		// Both limits stay small enough to be reached by a fuzzed prompt.
		l := limits{vocabSize: int(vocab % (1 << 20)), maxContext: int(maxCtx % (1 << 13)), maxInput: int(maxIn % (1 << 13))}
		if err := validateAgainst(prompt, sp, l); err != nil {
			if f, ok := fault.As(err); !ok || f.Kind != fault.Invalid || f.Field == "" || f.Msg == "" {
				t.Fatalf("validateAgainst: %v (%#v); want an invalid-request fault naming its field, with a message", err, f)
			}
			return
		}
		if len(prompt) == 0 {
			t.Fatal("validateAgainst accepted an empty prompt")
		}
		if l.maxInput > 0 && len(prompt) > l.maxInput {
			t.Fatalf("validateAgainst accepted %d prompt tokens where the engines accept %d", len(prompt), l.maxInput)
		}
		for _, v := range append(append([]uint32(nil), prompt...), sp.StopTokenIds...) {
			if l.vocabSize > 0 && int(v) >= l.vocabSize {
				t.Fatalf("validateAgainst accepted token id %d with vocab_size %d", v, l.vocabSize)
			}
		}
		if l.maxContext > 0 {
			n := len(prompt)
			if n >= l.maxContext || n+int(sp.MinNewTokens) > l.maxContext ||
				(sp.MaxNewTokens != nil && n+int(*sp.MaxNewTokens) > l.maxContext) {
				t.Fatalf("validateAgainst accepted %d prompt tokens, min %d, max %v in a context of %d",
					n, sp.MinNewTokens, sp.MaxNewTokens, l.maxContext)
			}
		}
	})
}

// FuzzEmbeddingCheck: an Embed batch checked against the workers' limits
// is refused with an invalid-request fault, or is within them.
func FuzzEmbeddingCheck(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0}, uint8(2), uint32(1000), uint32(8), uint32(0))
	f.Add([]byte{255, 255, 255, 255}, uint8(1), uint32(0), uint32(0), uint32(1))
	f.Fuzz(func(t *testing.T, ids []byte, n uint8, vocab, maxCtx, maxIn uint32) {
		all := fuzzIDs(ids, 1<<12)
		t1 := &Embedding{}
		// n splits the ids into up to 8 inputs.
		parts := int(n%8) + 1
		for i := range parts {
			t1.inputs = append(t1.inputs, all[i*len(all)/parts:(i+1)*len(all)/parts])
		}
		l := limits{vocabSize: int(vocab % (1 << 16)), maxContext: int(maxCtx % (1 << 10)), maxInput: int(maxIn % (1 << 10))}
		if err := t1.check(l); err != nil {
			if f, ok := fault.As(err); !ok || f.Kind != fault.Invalid || f.Field == "" {
				t.Fatalf("check: %v; want an invalid-request fault naming its field", err)
			}
			return
		}
		for i, in := range t1.inputs {
			if l.maxContext > 0 && len(in) > l.maxContext {
				t.Fatalf("check accepted %d tokens in inputs[%d], in a context of %d", len(in), i, l.maxContext)
			}
			if l.maxInput > 0 && len(in) > l.maxInput+1 {
				t.Fatalf("check accepted %d tokens in inputs[%d] where the engines accept %d and one for output", len(in), i, l.maxInput)
			}
			for _, id := range in {
				if l.vocabSize > 0 && int(id) >= l.vocabSize {
					t.Fatalf("check accepted token id %d with vocab_size %d", id, l.vocabSize)
				}
			}
		}
	})
}

// fuzzIDs reads little-endian uint32 token ids from b, at most max of them.
func fuzzIDs(b []byte, max int) []uint32 {
	var ids []uint32
	for len(b) >= 4 && len(ids) < max {
		ids = append(ids, uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)
		b = b[4:]
	}
	return ids
}
