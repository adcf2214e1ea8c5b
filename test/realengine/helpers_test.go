package realengine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// vocabSize is the tiny model's vocabulary: the Qwen3 tokenizer's 151,669 ids
// (scripts/realengine/build_model.py).
const vocabSize = 151669

// imEnd is Qwen3's <|im_end|>, the model's end of sequence.
const imEnd = 151645

// result is one call's stream, gathered.
type result struct {
	chunks   []*kvgatev1.GenerateChunk
	complete *kvgatev1.GenerateComplete
}

// streamedIDs is every token id the chunks carried.
func (r result) streamedIDs() []uint32 {
	var ids []uint32
	for _, c := range r.chunks {
		ids = append(ids, c.GetTokenIds()...)
	}
	return ids
}

// generate calls kvgate's Generate and gathers the stream; md is gRPC
// metadata as key, value pairs.
func (f *front) generate(ctx context.Context, req *kvgatev1.GenerateRequest, md ...string) (result, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	st, err := f.router.Generate(ctx, req)
	if err != nil {
		return result{}, err
	}
	var r result
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if r.complete == nil {
				return r, errors.New("Generate ended without a completion")
			}
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if c := m.GetChunk(); c != nil {
			r.chunks = append(r.chunks, c)
		}
		if c := m.GetComplete(); c != nil {
			r.complete = c
		}
	}
}

// chat calls kvgate's Chat and gathers the stream.
func (f *front) chat(ctx context.Context, req *kvgatev1.ChatRequest) (result, error) {
	st, err := f.router.Chat(ctx, req)
	if err != nil {
		return result{}, err
	}
	var r result
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if r.complete == nil {
				return r, errors.New("Chat ended without a completion")
			}
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if c := m.GetChunk(); c != nil {
			r.chunks = append(r.chunks, c)
		}
		if c := m.GetComplete(); c != nil {
			r.complete = c
		}
	}
}

// engineCached asks engine e itself how many of ids' tokens it holds: it runs
// the prompt for one token and returns the cached tokens it reports.
func (e *engine) engineCached(ctx context.Context, ids []uint32) (uint32, error) {
	st, err := e.client.Generate(ctx, &vllm.GenerateRequest{
		RequestId: fmt.Sprintf("probe-%d", rand.Uint64()),
		Input:     &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: ids}},
		SamplingParams: &vllm.SamplingParams{
			Temperature: proto.Float32(0), TopP: 1, RepetitionPenalty: 1, MaxTokens: proto.Uint32(1), N: 1,
		},
	})
	if err != nil {
		return 0, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return 0, fmt.Errorf("probe of engine %d: %w", e.index, err)
		}
		if c := m.GetComplete(); c != nil {
			return c.GetCachedTokens(), nil
		}
	}
}

// running is the engine's own count of running and waiting requests.
func (e *engine) running(ctx context.Context) (int, error) {
	l, err := e.client.GetLoads(ctx, &vllm.GetLoadsRequest{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range l.GetLoads() {
		n += int(s.GetNumRunningReqs() + s.GetNumWaitingReqs())
	}
	return n, nil
}

// randomIDs returns n token ids from a fixed seed, below the ids the
// tokenizer reserves for special tokens.
func randomIDs(seed uint64, n int) []uint32 {
	r := rand.New(rand.NewPCG(seed, 22))
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1000 + r.IntN(150000))
	}
	return ids
}

// workerIndex returns the registration index of the worker whose URL is url.
func (s *realSuite) workerIndex(t *testing.T, url string) int {
	t.Helper()
	for i, e := range s.engines {
		if e.url() == url {
			return i
		}
	}
	t.Fatalf("worker %q is none of the engines", url)
	return -1
}

// explain asks kvgate where ids would go and what it predicts.
func (f *front) explain(ctx context.Context, t *testing.T, ids []uint32) *kvgatev1.ExplainResponse {
	t.Helper()
	r, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{
		Generate: &kvgatev1.GenerateRequest{InputIds: ids}}})
	if err != nil {
		t.Fatalf("Explain: %v", err)
	}
	return r
}

// confirmedOn is the tokens of the explained prompt kvgate's mirror says
// engine holds, from its KV events.
func confirmedOn(r *kvgatev1.ExplainResponse, e *engine) uint32 {
	for _, w := range r.GetWorkers() {
		if w.GetAddress() == e.url() {
			return w.GetConfirmedTokens()
		}
	}
	return 0
}

// reference is what transformers, on the model's own files, makes of chats
// and texts (scripts/realengine/reference.py).
type reference struct {
	Chats  [][]uint32 `json:"chats"`
	Texts  [][]uint32 `json:"texts"`
	Decode []string   `json:"decode"`
}

type referenceRequest struct {
	Model  string              `json:"model"`
	Chats  [][]json.RawMessage `json:"chats,omitempty"`
	Texts  []string            `json:"texts,omitempty"`
	Decode [][]uint32          `json:"decode,omitempty"`
}

func (s *realSuite) reference(t *testing.T, req referenceRequest) reference {
	t.Helper()
	req.Model = s.model
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.python, filepath.Join("..", "..", "scripts", "realengine", "reference.py"))
	cmd.Env = append(cmd.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var ref reference
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatalf("reference.py's answer %q: %v", out, err)
	}
	return ref
}

func message(role, content string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": role, "content": content})
	return b
}

// metadataCtx adds gRPC metadata (key, value pairs) to ctx.
func metadataCtx(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
