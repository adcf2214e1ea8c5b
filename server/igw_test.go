package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// llama2Dir writes a model directory with Llama 2's real tokenizer (fetched
// by make testdata; small enough to load in a moment under the race
// detector) and a Llama-2-chat style template of ours.
func llama2Dir(t *testing.T) string {
	t.Helper()
	src := "../tokenize/testdata/tokenizers/llama2/"
	dir := t.TempDir()
	tok, err := os.ReadFile(src + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	raw, err := os.ReadFile(src + "tokenizer_config.json")
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]" +
		"{% else %} {{ m.content }} {{ eos_token }}{% endif %}{% endfor %}"
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tokenizer.json": tok, "tokenizer_config.json": raw} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startTwoModels starts a router with --enable-igw in front of three
// engines: "alpha" on engines 0 and 1 (the simulator's own tokenizer and
// ChatML template) and "beta" on engine 2 (Llama 2's tokenizer, a Llama 2
// chat template).
func startTwoModels(t *testing.T) *fleet {
	t.Helper()
	beta := llama2Dir(t)
	return startFleet(t, fleetOptions{workers: 3, policy: "cache_aware", text: true,
		sim: func(i int, c *sim.Config) {
			c.Model = "alpha"
			if i == 2 {
				c.Model, c.TokenizerDir = "beta", beta
			}
		},
		config: func(c *router.Config) { c.IGW = true },
	})
}

func TestIGWRoutesEachModelToItsOwnWorkers(t *testing.T) {
	f := startTwoModels(t)
	alpha := []string{f.workerURL(0), f.workerURL(1)}
	beta := []string{f.workerURL(2)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := []*kvgatev1.ChatMessage{{Role: "user", Content: "What is the capital of France?"}}
	for i := range 6 {
		for _, tc := range []struct {
			model   string
			workers []string
		}{{"alpha", alpha}, {"beta", beta}} {
			r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Model: tc.model, Messages: msgs,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4)}})
			if err != nil {
				t.Fatalf("Chat %s #%d: %v", tc.model, i, err)
			}
			if !slices.Contains(tc.workers, r.complete.GetWorker()) {
				t.Fatalf("Chat %s went to %s; its workers are %v", tc.model, r.complete.GetWorker(), tc.workers)
			}
			g := f.mustGenerate(t, &kvgatev1.GenerateRequest{Model: tc.model, InputIds: prompt(100, 64),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
			if !slices.Contains(tc.workers, g.complete.GetWorker()) {
				t.Fatalf("Generate %s went to %s; its workers are %v", tc.model, g.complete.GetWorker(), tc.workers)
			}
		}
	}

	// Each model renders with its own template: Explain reports the
	// prompt's length, which differs between ChatML on a small BPE and
	// Llama 2's template and tokenizer.
	lengths := map[string]uint32{}
	for _, m := range []string{"alpha", "beta"} {
		resp, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Chat{
			Chat: &kvgatev1.ChatRequest{Model: m, Messages: msgs}}})
		if err != nil {
			t.Fatalf("Explain %s: %v", m, err)
		}
		lengths[m] = resp.GetPromptTokens()
		var seen []string
		for _, w := range resp.GetWorkers() {
			seen = append(seen, w.GetAddress())
		}
		if own := map[string][]string{"alpha": alpha, "beta": beta}[m]; !slices.Equal(seen, own) {
			t.Errorf("Explain %s shows workers %v; its model's are %v", m, seen, own)
		}
	}
	if lengths["alpha"] == lengths["beta"] {
		t.Errorf("both models rendered the conversation to %d tokens; each should use its own template and tokenizer", lengths["alpha"])
	}

	// Each model has its own tree: the metrics name both, and each tree's
	// tenants are its own workers.
	fams := scrape(t, f)
	trees := map[string]bool{}
	for _, m := range fams["kvgate_tree_worker_tokens"].Series {
		model, worker := m.Labels["model"], m.Labels["worker"]
		trees[model] = true
		own := map[string][]string{"alpha": alpha, "beta": beta}[model]
		if !slices.Contains(own, worker) {
			t.Errorf("tree of model %q holds worker %s, which serves another model", model, worker)
		}
	}
	if !trees["alpha"] || !trees["beta"] {
		t.Errorf("trees by model = %v, want alpha and beta", trees)
	}

	models, err := f.admin.ListModels(ctx, &kvgatev1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*kvgatev1.Model{}
	for _, m := range models.GetModels() {
		got[m.GetName()] = m
	}
	if len(got) != 2 || !slices.Equal(got["alpha"].GetWorkers(), alpha) || !slices.Equal(got["beta"].GetWorkers(), beta) {
		t.Fatalf("ListModels = %v", models.GetModels())
	}
	if got["beta"].GetVocabSize() <= got["alpha"].GetVocabSize() || got["beta"].GetChatTemplate() == "" ||
		!strings.HasPrefix(got["beta"].GetTokenizer(), "worker ") || got["alpha"].GetTreeTokens() == 0 {
		t.Errorf("ListModels: alpha %v, beta %v", got["alpha"], got["beta"])
	}
}

func TestIGWRefusesRequestsWithoutAServedModel(t *testing.T) {
	f := startTwoModels(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, model string
		code        codes.Code
		says        []string
	}{
		{"unknown model", "gamma", codes.NotFound, []string{`"gamma"`, `"alpha"`, `"beta"`}},
		{"no model with two served", "", codes.InvalidArgument, []string{"model is empty", `"alpha"`, `"beta"`}},
		{"a name too long", strings.Repeat("m", 300), codes.InvalidArgument, []string{"model is 300 bytes", "256"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Model: tc.model, InputIds: prompt(1, 8)})
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("Generate: %v, want %v", err, tc.code)
			}
			for _, s := range tc.says {
				if !strings.Contains(st.Message(), s) {
					t.Errorf("message %q does not say %s", st.Message(), s)
				}
			}
			_, err = f.chat(ctx, t, &kvgatev1.ChatRequest{Model: tc.model, Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}})
			if status.Code(err) != tc.code {
				t.Fatalf("Chat: %v, want %v", err, tc.code)
			}
		})
	}
}

// A worker of a model the router did not serve yet brings its model with
// it, with its own tree and tokenizer.
func TestIGWServesAModelWhoseWorkerJoinsLater(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, policy: "cache_aware", text: true,
		sim:    func(_ int, c *sim.Config) { c.Model = "alpha" },
		config: func(c *router.Config) { c.IGW = true },
	})
	// Loading a 32,000-token vocabulary under the race detector on a busy
	// machine has taken more than 20 s: the bound is a guard against a
	// hang, not a measure of speed.
	ctx, cancel := context.WithTimeout(context.Background(), 4*testutil.Patience)
	defer cancel()
	// With one model served, the model field may be omitted.
	if r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8)}); r.complete.GetWorker() != f.workerURL(0) {
		t.Fatalf("served by %s", r.complete.GetWorker())
	}
	c := sim.DefaultConfig()
	c.TimeScale, c.Model, c.TokenizerDir = 0, "beta", llama2Dir(t)
	s, err := sim.Start(c, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if _, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: "grpc://" + s.Addr()}); err != nil {
		t.Fatal(err)
	}
	// Its tokenizer loads in the background: until then the model answers
	// UNAVAILABLE, which a client retries.
	testutil.EventuallyState(t, 3*testutil.Patience, "model beta to answer", func() (bool, string) {
		_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Model: "beta", Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}},
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
		if err != nil && (status.Code(err) != codes.Unavailable || ctx.Err() != nil) {
			t.Fatalf("Chat beta while it starts: %v", err)
		}
		return err == nil, fmt.Sprint(err)
	})
	r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Model: "beta", Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hello"}},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
	if err != nil || r.complete.GetWorker() != "grpc://"+s.Addr() {
		t.Fatalf("Chat beta: %v, served by %s", err, r.complete.GetWorker())
	}
	// Two models now: a request must name one.
	if _, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Generate without a model: %v", err)
	}
}

// Without --enable-igw the router serves one model: the model field may name
// it, and a name its workers do not report is refused.
func TestSingleModelChecksTheModelField(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(_ int, c *sim.Config) { c.Model = "alpha" }})
	f.mustGenerate(t, &kvgatev1.GenerateRequest{Model: "alpha", InputIds: prompt(1, 8)})
	f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Model: "beta", InputIds: prompt(1, 8)})
	if st := status.Convert(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), `"alpha"`) {
		t.Fatalf("Generate beta: %v", err)
	}
	models, err := f.admin.ListModels(ctx, &kvgatev1.ListModelsRequest{})
	if err != nil || len(models.GetModels()) != 1 || len(models.GetModels()[0].GetWorkers()) != 2 {
		t.Fatalf("ListModels: %v %v", models, err)
	}
}

// With prefill/decode disaggregation each model pairs its own prefill and
// decode workers.
func TestIGWDisaggregatesEachModelOnItsOwnPair(t *testing.T) {
	models := []string{"alpha", "beta", "alpha", "beta"} // prefill 0, 1; decode 2, 3
	f := startFleet(t, fleetOptions{workers: 4, pd: true, policy: "cache_aware",
		sim:    func(i int, c *sim.Config) { c.Model = models[i] },
		config: func(c *router.Config) { c.IGW = true },
	})
	for i := range 8 {
		m := models[i%2]
		r := f.mustGenerate(t, &kvgatev1.GenerateRequest{Model: m, InputIds: prompt(uint32(10*i+1), 40),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
		if r.complete.GetPrefillWorker() != f.workerURL(i%2) || r.complete.GetWorker() != f.workerURL(2+i%2) {
			t.Fatalf("model %s: prefill %s, decode %s; want %s and %s", m, r.complete.GetPrefillWorker(), r.complete.GetWorker(),
				f.workerURL(i%2), f.workerURL(2+i%2))
		}
	}
}
