package workers_test

// Structured output and log-probabilities from the router's side of the
// adapters, against the simulator over real gRPC: a JSON schema sent as a
// Constraint comes back as the schema's instance, in both protocols.

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"

	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// startTokenizerSim serves a simulator with its built-in tokenizer and
// returns a worker for it and that tokenizer, as the router gets it.
func startTokenizerSim(t *testing.T, protocol string) (*workers.Worker, *tokenize.Tokenizer) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Protocol = protocol
	cfg.TimeScale = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	_, w := simtest.Worker(t, cfg)
	archive, err := w.Backend().Tokenizer(testutil.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], _ = io.ReadAll(rc)
		_ = rc.Close()
	}
	tok, err := tokenize.FromJSON(files["tokenizer.json"], files["tokenizer_config.json"])
	if err != nil {
		t.Fatal(err)
	}
	return w, tok
}

func TestSimStructuredOutputThroughAdapters(t *testing.T) {
	const schema = `{"type":"object","required":["city","population"],"properties":{"city":{"type":"string","minLength":1},"population":{"type":"integer","minimum":1}}}`
	for _, p := range allSimProtocols {
		for _, noStream := range []bool{false, true} {
			name := p.name + "/stream"
			if noStream {
				name = p.name + "/complete"
			}
			t.Run(name, func(t *testing.T) {
				w, tok := startTokenizerSim(t, p.name)
				st, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{
					RequestID: "json", InputIDs: []uint32{10, 11, 12}, NoStream: noStream,
					Sampling: workers.Sampling{MaxNewTokens: ptr(uint32(100)),
						Constraint: workers.Constraint{Kind: workers.JSONSchema, Value: schema}},
					Logprobs: &workers.LogprobRequest{Output: true, TopK: 1},
				})
				if err != nil {
					t.Fatal(err)
				}
				got := simtest.ReadLogprobs(t, st)
				ids := got.Final.OutputIDs
				if got.Final.FinishReason != "stop" || got.Final.MatchedStopTokenID == nil || len(ids) == 0 {
					t.Fatalf("completion %+v", got.Final)
				}
				text, err := tok.Decode(ids[:len(ids)-1], false)
				if err != nil {
					t.Fatal(err)
				}
				var v struct {
					City       string `json:"city"`
					Population int    `json:"population"`
				}
				if err := json.Unmarshal([]byte(text), &v); err != nil || v.City == "" || v.Population < 1 {
					t.Errorf("answer %q (%v) is not an instance of the schema", text, err)
				}
				lps := got.ChunkLogprobs
				if noStream {
					lps = got.FinalLogprobs
				}
				if len(lps) != len(ids) {
					t.Errorf("%d output log-probabilities for %d tokens", len(lps), len(ids))
				}
			})
		}
	}
}
