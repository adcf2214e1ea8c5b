package workers_test

// Decoding the engines' log-probabilities: what a scripted engine sends
// reaches the router as the neutral types, only what was asked for is
// handed on, and parallel arrays that do not line up end the stream with
// DATA_LOSS.

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// lpMessages are one chunk and one completion in protocol-neutral shape,
// built into each protocol's messages by the test.
type lpMessages struct {
	outVals []float32
	outIDs  []uint32
	outTop  [][2][]float32 // per position: values, ids (as float32 for brevity)
	inVals  []*float32     // nil: no value
	inIDs   []uint32
}

func f32(v float32) *float32 { return &v }

func topIDs(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = uint32(x)
	}
	return out
}

func (m lpMessages) sglang() (*sglang.OutputLogProbs, *sglang.InputLogProbs) {
	out := &sglang.OutputLogProbs{TokenLogprobs: m.outVals, TokenIds: m.outIDs}
	for _, t := range m.outTop {
		out.TopLogprobs = append(out.TopLogprobs, &sglang.TopLogProbs{Values: t[0], TokenIds: topIDs(t[1])})
	}
	in := &sglang.InputLogProbs{TokenIds: m.inIDs}
	for _, v := range m.inVals {
		in.TokenLogprobs = append(in.TokenLogprobs, &sglang.InputTokenLogProb{Value: v})
	}
	return out, in
}

func (m lpMessages) vllm() (*vllm.OutputLogProbs, *vllm.InputLogProbs) {
	out := &vllm.OutputLogProbs{TokenLogprobs: m.outVals, TokenIds: m.outIDs}
	for _, t := range m.outTop {
		out.TopLogprobs = append(out.TopLogprobs, &vllm.TopLogProbs{Values: t[0], TokenIds: topIDs(t[1])})
	}
	in := &vllm.InputLogProbs{TokenIds: m.inIDs}
	for _, v := range m.inVals {
		in.TokenLogprobs = append(in.TokenLogprobs, &vllm.InputTokenLogProb{Value: v})
	}
	return out, in
}

// lpBackend serves one chunk carrying m (for tokens 7, 8) and a completion
// carrying it again, in protocol p, and returns the adapter.
func lpBackend(t *testing.T, p workers.Protocol, m lpMessages) workers.Backend {
	if p == workers.ProtocolSGLang {
		out, in := m.sglang()
		e := &sglangEngine{replies: []*sglang.GenerateResponse{
			{Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{TokenIds: []uint32{7, 8}, OutputLogprobs: out, InputLogprobs: in}}},
			{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{OutputIds: []uint32{7, 8}, FinishReason: "length", OutputLogprobs: out, InputLogprobs: in}}},
		}}
		return workers.NewSGLangBackend(testutil.Dial(t, e.start(t)))
	}
	out, in := m.vllm()
	e := &vllmEngine{replies: []*vllm.GenerateResponse{
		{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{TokenIds: []uint32{7, 8}, OutputLogprobs: out, InputLogprobs: in}}},
		{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{OutputIds: []uint32{7, 8}, FinishReason: "length", OutputLogprobs: out, InputLogprobs: in}}},
	}}
	return workers.NewVLLMBackend(testutil.Dial(t, e.start(t)))
}

func TestLogprobsDecoded(t *testing.T) {
	good := lpMessages{
		outVals: []float32{-0.5, -1.25}, outIDs: []uint32{7, 8},
		outTop: [][2][]float32{{{-0.5, -2}, {7, 9}}, {{-0.25, -1.25}, {3, 8}}},
		inVals: []*float32{nil, f32(-3)}, inIDs: []uint32{1, 2},
	}
	wantOut := []workers.Logprob{
		{TokenID: 7, Value: -0.5, Top: []workers.TopLogprob{{TokenID: 7, Value: -0.5}, {TokenID: 9, Value: -2}}},
		{TokenID: 8, Value: -1.25, Top: []workers.TopLogprob{{TokenID: 3, Value: -0.25}, {TokenID: 8, Value: -1.25}}},
	}
	wantIn := []workers.Logprob{{TokenID: 1, Missing: true}, {TokenID: 2, Value: -3}}
	cases := []struct {
		name            string
		msgs            lpMessages
		ask             *workers.LogprobRequest
		wantOut, wantIn []workers.Logprob
		corrupt         bool
	}{
		{name: "both", msgs: good, ask: &workers.LogprobRequest{Output: true, Prompt: true, TopK: 2}, wantOut: wantOut, wantIn: wantIn},
		{name: "output only", msgs: good, ask: &workers.LogprobRequest{Output: true, TopK: 2}, wantOut: wantOut},
		{name: "prompt only", msgs: good, ask: &workers.LogprobRequest{Prompt: true, TopK: 2}, wantIn: wantIn},
		{name: "not asked", msgs: good},
		{name: "fewer ids than values", ask: &workers.LogprobRequest{Output: true},
			msgs: lpMessages{outVals: []float32{-1, -2}, outIDs: []uint32{7}}, corrupt: true},
		{name: "top for some positions", ask: &workers.LogprobRequest{Output: true, TopK: 1},
			msgs: lpMessages{outVals: []float32{-1, -2}, outIDs: []uint32{7, 8}, outTop: [][2][]float32{{{-1}, {7}}}}, corrupt: true},
		{name: "top values without ids", ask: &workers.LogprobRequest{Output: true, TopK: 1},
			msgs: lpMessages{outVals: []float32{-1, -2}, outIDs: []uint32{7, 8}, outTop: [][2][]float32{{{-1}, {7}}, {{-2}, {}}}}, corrupt: true},
		{name: "prompt values without ids", ask: &workers.LogprobRequest{Prompt: true},
			msgs: lpMessages{inVals: []*float32{nil, f32(-1)}, inIDs: []uint32{1}}, corrupt: true},
	}
	for _, p := range []workers.Protocol{workers.ProtocolSGLang, workers.ProtocolVLLM} {
		for _, tc := range cases {
			t.Run(p.String()+"/"+tc.name, func(t *testing.T) {
				b := lpBackend(t, p, tc.msgs)
				st, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "lp", InputIDs: []uint32{1, 2}, Logprobs: tc.ask})
				if err != nil {
					t.Fatal(err)
				}
				c, err := st.Recv()
				if tc.corrupt {
					if !testutil.IsFault(err, fault.Corrupt) {
						t.Fatalf("Recv = %+v, %v; want a corrupt-answer fault", c, err)
					}
					if _, again := st.Recv(); !testutil.IsFault(again, fault.Corrupt) {
						t.Errorf("the error is not sticky: then %v", again)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(c.Logprobs, tc.wantOut) || !reflect.DeepEqual(c.PromptLogprobs, tc.wantIn) {
					t.Errorf("chunk logprobs %+v, prompt %+v; want %+v, %+v", c.Logprobs, c.PromptLogprobs, tc.wantOut, tc.wantIn)
				}
				c, err = st.Recv()
				if err != nil || c.Final == nil {
					t.Fatalf("completion: %+v, %v", c, err)
				}
				if !reflect.DeepEqual(c.Final.Logprobs, tc.wantOut) || !reflect.DeepEqual(c.Final.PromptLogprobs, tc.wantIn) {
					t.Errorf("completion logprobs %+v, prompt %+v; want %+v, %+v", c.Final.Logprobs, c.Final.PromptLogprobs, tc.wantOut, tc.wantIn)
				}
			})
		}
	}
}
