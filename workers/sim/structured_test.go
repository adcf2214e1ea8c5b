package sim

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
)

// withTokenizer serves the built-in tokenizer, which structured answers are
// written with.
func withTokenizer(c *Config) {
	d := DefaultConfig()
	c.TokenizerDir, c.VocabSize, c.EOSTokenID = "", 0, d.EOSTokenID
}

func TestStructuredOutput(t *testing.T) {
	const schema = `{"type":"object","required":["name","tags","age"],"properties":{"name":{"type":"string","minLength":2},` +
		`"tags":{"type":"array","minItems":2,"items":{"enum":["x","y"]}},"age":{"type":"integer","minimum":18}}}`
	cases := []struct {
		name       string
		q          lpReq
		vllmOnly   bool
		want       string // "" : sampled, not this
		wantFinish string
	}{
		{name: "json_schema streamed", q: lpReq{schema: schema, maxNew: 200}, want: `{"age":18,"name":"aa","tags":["x","x"]}`, wantFinish: "stop"},
		{name: "json_schema complete", q: lpReq{schema: schema, maxNew: 200, noStream: true}, want: `{"age":18,"name":"aa","tags":["x","x"]}`, wantFinish: "stop"},
		{name: "json_object", q: lpReq{jsonObject: true, maxNew: 50}, vllmOnly: true, want: `{}`, wantFinish: "stop"},
		{name: "regex is ignored", q: lpReq{regex: "[0-9]+", maxNew: 8}},
	}
	forEachProtocol(t, withTokenizer, func(t *testing.T, srv *Process, _ client) {
		e := srv.Engine()
		tok, err := e.encoder()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			if tc.vllmOnly && e.Config().Protocol != ProtocolVLLM {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				tc.q.prompt = []uint32{10, 11, 12}
				r := runLP(t, srv, tc.q)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if !tc.q.noStream {
					var streamed []uint32
					for _, c := range r.chunks {
						streamed = append(streamed, c.tokens...)
					}
					if string(fmtIDs(streamed)) != string(fmtIDs(r.outputIDs)) {
						t.Errorf("streamed %v, completion lists %v", streamed, r.outputIDs)
					}
				}
				ids := r.outputIDs
				if r.finish == "stop" && len(ids) > 0 && ids[len(ids)-1] == uint32(e.Config().EOSTokenID) {
					ids = ids[:len(ids)-1]
				}
				text, err := tok.Decode(ids, false)
				if err != nil {
					t.Fatal(err)
				}
				if tc.want == "" {
					if json.Valid([]byte(text)) && len(text) > 0 && text[0] == '{' {
						t.Errorf("an unconstrained answer came out as JSON: %q", text)
					}
					return
				}
				if text != tc.want || r.finish != tc.wantFinish {
					t.Errorf("answer %q (%s), want %q (%s)", text, r.finish, tc.want, tc.wantFinish)
				}
			})
		}
		// A token limit cuts the answer like any other.
		r := runLP(t, srv, lpReq{prompt: []uint32{10}, schema: schema, maxNew: 3})
		if r.err != nil || r.finish != "length" || len(r.outputIDs) != 3 {
			t.Errorf("max_new_tokens 3: %d ids, finish %q, err %v", len(r.outputIDs), r.finish, r.err)
		}
		// A schema the simulator cannot instantiate is refused.
		r = runLP(t, srv, lpReq{prompt: []uint32{10}, schema: `{"type":"string","pattern":"^[0-9]{3}$"}`, maxNew: 10})
		wantCode(t, r.err, codes.InvalidArgument, "json_schema")
	})
}

// Without a tokenizer there is nothing to write the answer with.
func TestStructuredOutputNeedsTokenizer(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, _ client) {
		r := runLP(t, srv, lpReq{prompt: []uint32{10}, schema: `{"type":"object"}`, maxNew: 10})
		wantCode(t, r.err, codes.InvalidArgument, "tokenizer")
	})
}

func fmtIDs(ids []uint32) []byte { b, _ := json.Marshal(ids); return b }
