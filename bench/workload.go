// Package bench measures kvgate's routing policies side by side: it generates
// deterministic workloads (shared prefixes, multi-turn conversations, replayed
// Mooncake traces), drives a router over gRPC exactly as a client would, and
// reports latency, throughput, cache hit rates against an oracle, prediction
// exactness and load balance, as a table, JSON and an SVG chart.
package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"
)

// Token ids are drawn below this bound: Llama-3's ordinary vocabulary, under
// its special tokens (128000 and up), so no prompt holds an EOS or BOS id.
const (
	maxTokenID = 128000
	// VocabSize and EOSTokenID configure the simulated engines for token-id
	// workloads (Llama-3.1's figures).
	VocabSize  = 128256
	EOSTokenID = 128001
	// DefaultTraceBlockTokens is the tokens behind each hash id of a
	// Mooncake trace, as the Mooncake traces were recorded.
	DefaultTraceBlockTokens = 512
)

// Workload names.
const (
	SharedPrefix = "shared-prefix"
	Multiturn    = "multiturn"
	Trace        = "trace"
)

// WorkloadConfig sizes a workload. Zero values take the defaults of
// DefaultWorkloadConfig.
type WorkloadConfig struct {
	Name string
	Seed uint64

	// shared-prefix: Groups × PromptsPerGroup prompts; each group shares a
	// SystemTokens-long system prompt, each prompt adds QuestionTokens.
	Groups          int
	PromptsPerGroup int
	SystemTokens    int
	QuestionTokens  int
	OutputTokens    int

	// multiturn: Users × Rounds turns after one shared SystemTokens-long
	// system prompt (MultiturnSystemTokens); each turn adds QuestionTokens and
	// the previous answer of AnswerTokens.
	Users                 int
	Rounds                int
	MultiturnSystemTokens int
	AnswerTokens          int

	// trace: the Mooncake JSONL file and the replay speed-up.
	TracePath string
	Speed     float64
	// TraceBlockTokens is the tokens behind each of the trace's hash ids
	// (0: 512, Mooncake's).
	TraceBlockTokens int

	// QPS is the Poisson arrival rate of shared-prefix requests and of
	// multiturn conversations' first turns (0: as fast as concurrency allows).
	QPS float64
	// Requests caps the number of requests (0: the whole workload).
	Requests int
}

// DefaultWorkloadConfig returns the default sizes.
func DefaultWorkloadConfig() WorkloadConfig {
	return WorkloadConfig{
		Name:                  SharedPrefix,
		Groups:                64,
		PromptsPerGroup:       16,
		SystemTokens:          2048,
		QuestionTokens:        128,
		OutputTokens:          256,
		Users:                 64,
		Rounds:                8,
		MultiturnSystemTokens: 1000,
		AnswerTokens:          100,
		Speed:                 1,
	}
}

// Arrival is one request of an open-loop workload (shared-prefix, trace).
type Arrival struct {
	// At is the arrival time from the start of the run.
	At     time.Duration
	Prompt []uint32
	Output int
}

// ChatUser is one multiturn user: a first arrival and the questions of
// each round; the prompt of round r is the previous prompt, the previous
// answer and Questions[r].
type ChatUser struct {
	At        time.Duration
	System    []uint32
	Questions [][]uint32
	Output    int
}

// Workload is a generated workload: Requests for open-loop workloads,
// Conversations for multiturn.
type Workload struct {
	Name          string
	Requests      []Arrival
	Conversations []ChatUser
	// Limit caps the requests a closed-loop workload sends (0: all).
	Limit int
}

// Size is the number of requests the workload sends.
func (w *Workload) Size() int {
	if w.Conversations == nil {
		return len(w.Requests)
	}
	n := 0
	for _, c := range w.Conversations {
		n += len(c.Questions)
	}
	if w.Limit > 0 && w.Limit < n {
		return w.Limit
	}
	return n
}

// Generate builds the workload cfg describes; the same cfg always gives the
// same workload.
func Generate(cfg WorkloadConfig) (*Workload, error) {
	switch cfg.Name {
	case SharedPrefix:
		return sharedPrefix(cfg), nil
	case Multiturn:
		return multiturn(cfg), nil
	case Trace:
		if cfg.TracePath == "" {
			return nil, fmt.Errorf("workload %q needs --trace FILE", Trace)
		}
		f, err := os.Open(cfg.TracePath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return ReadTrace(f, TraceConfig{Speed: cfg.Speed, Limit: cfg.Requests, BlockTokens: cfg.TraceBlockTokens})
	}
	if cfg.Name == Unique {
		return nil, fmt.Errorf("workload %q is not generated ahead: RunUnique sends it", Unique)
	}
	return nil, fmt.Errorf("unknown workload %q (shared-prefix, multiturn, trace, unique)", cfg.Name)
}

// tokens returns n pseudo-random token ids from r.
func tokens(r *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(r.IntN(maxTokenID))
	}
	return out
}

// rng is a generator keyed by the workload seed and a path of indices, so each part of
// a workload is independent of how many others were drawn before it.
func rng(seed uint64, path ...uint64) *rand.Rand {
	s := mix64(seed + 0x9e3779b97f4a7c15)
	for _, p := range path {
		s = mix64(s ^ mix64(p+0xbf58476d1ce4e5b9))
	}
	return rand.New(rand.NewPCG(s, mix64(s)))
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// arrivals returns n Poisson arrival times at qps (all zero when qps is 0).
func arrivals(seed uint64, n int, qps float64) []time.Duration {
	out := make([]time.Duration, n)
	if qps <= 0 {
		return out
	}
	r := rng(seed, 0xa771)
	t := 0.0
	for i := range out {
		t += r.ExpFloat64() / qps
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

func sharedPrefix(cfg WorkloadConfig) *Workload {
	systems := make([][]uint32, cfg.Groups)
	for g := range systems {
		systems[g] = tokens(rng(cfg.Seed, 1, uint64(g)), cfg.SystemTokens)
	}
	var reqs []Arrival
	for g := range cfg.Groups {
		for i := range cfg.PromptsPerGroup {
			p := make([]uint32, 0, cfg.SystemTokens+cfg.QuestionTokens)
			p = append(p, systems[g]...)
			p = append(p, tokens(rng(cfg.Seed, 2, uint64(g), uint64(i)), cfg.QuestionTokens)...)
			reqs = append(reqs, Arrival{Prompt: p, Output: cfg.OutputTokens})
		}
	}
	// Interleave the groups: a seeded shuffle, as SGLang's generated-shared-
	// prefix benchmark does (a strict rotation would let round_robin line
	// groups up with workers).
	rng(cfg.Seed, 3).Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	if cfg.Requests > 0 && cfg.Requests < len(reqs) {
		reqs = reqs[:cfg.Requests]
	}
	for i, at := range arrivals(cfg.Seed, len(reqs), cfg.QPS) {
		reqs[i].At = at
	}
	return &Workload{Name: SharedPrefix, Requests: reqs}
}

func multiturn(cfg WorkloadConfig) *Workload {
	system := tokens(rng(cfg.Seed, 4), cfg.MultiturnSystemTokens)
	convs := make([]ChatUser, cfg.Users)
	at := arrivals(cfg.Seed, cfg.Users, cfg.QPS)
	for u := range convs {
		c := ChatUser{At: at[u], System: system, Output: cfg.AnswerTokens}
		for r := range cfg.Rounds {
			c.Questions = append(c.Questions, tokens(rng(cfg.Seed, 5, uint64(u), uint64(r)), cfg.QuestionTokens))
		}
		convs[u] = c
	}
	return &Workload{Name: Multiturn, Conversations: convs, Limit: cfg.Requests}
}

// traceRecord is one line of a Mooncake trace. The pointer fields are
// ones kvgate bench cannot replay (aiperf's multi-turn sessions and literal
// prompts): read only to refuse them by name.
type traceRecord struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`

	SessionID *json.RawMessage `json:"session_id"`
	Delay     *json.RawMessage `json:"delay"`
	TextInput *json.RawMessage `json:"text_input"`
	Messages  *json.RawMessage `json:"messages"`
	Payload   *json.RawMessage `json:"payload"`
}

// TraceConfig says how ReadTrace replays a trace.
type TraceConfig struct {
	// Speed divides the timestamps (0: 1).
	Speed float64
	// Limit keeps the first this many requests in arrival order (0: all).
	Limit int
	// BlockTokens is the tokens behind each hash id (0: 512, Mooncake's).
	BlockTokens int
}

// ReadTrace reads a Mooncake-format trace: each hash id becomes
// tc.BlockTokens tokens seeded by the id, each prompt is cut to its
// input_length, and arrivals are the timestamps (ms) divided by tc.Speed,
// in time order whatever the file's. A line the replay cannot honour (no
// timestamp, a length out of range, a multi-turn session or a literal
// prompt) is refused with its line number and field, never replayed as
// something else.
func ReadTrace(r io.Reader, tc TraceConfig) (*Workload, error) {
	speed, block := tc.Speed, tc.BlockTokens
	if speed <= 0 {
		speed = 1
	}
	if block <= 0 {
		block = DefaultTraceBlockTokens
	}
	type row struct {
		rec  traceRecord
		line int
	}
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec traceRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		rows = append(rows, row{rec, line})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Arrival order: a trace merged from several sources need not be
	// sorted, and the driver sends in slice order.
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(*a.rec.Timestamp, *b.rec.Timestamp) })
	if tc.Limit > 0 && len(rows) > tc.Limit {
		rows = rows[:tc.Limit]
	}
	blocks := map[uint64][]uint32{}
	w := &Workload{Name: Trace, Requests: make([]Arrival, 0, len(rows))}
	for _, rw := range rows {
		rec := rw.rec
		p := make([]uint32, 0, rec.InputLength)
		for _, id := range rec.HashIDs {
			if len(p) >= rec.InputLength {
				break
			}
			b, ok := blocks[id]
			if !ok {
				b = tokens(rng(0x7ace, id), block)
				blocks[id] = b
			}
			p = append(p, b...)
		}
		if len(p) < rec.InputLength { // more tokens than blocks: unique filler
			p = append(p, tokens(rng(0xf111, uint64(rw.line)), rec.InputLength-len(p))...)
		}
		w.Requests = append(w.Requests, Arrival{
			At:     time.Duration(*rec.Timestamp / speed * float64(time.Millisecond)),
			Prompt: p[:rec.InputLength],
			Output: max(rec.OutputLength, 1),
		})
	}
	return w, nil
}

// maxTraceInputLength bounds a trace line's input_length: about eleven
// times the longest prompt of the Mooncake traces (191,378 tokens), so a
// typo cannot ask for gigabytes of prompt.
const maxTraceInputLength = 1 << 21

// check refuses what the replay cannot honour, naming the field.
func (rec *traceRecord) check() error {
	for _, f := range []struct {
		name, what string
		v          *json.RawMessage
	}{
		{"session_id", "a multi-turn session, whose turns follow each other's answers", rec.SessionID},
		{"delay", "a turn sent a delay after the previous one's answer", rec.Delay},
		{"text_input", "a literal prompt", rec.TextInput},
		{"messages", "a literal conversation", rec.Messages},
		{"payload", "a literal request body", rec.Payload},
	} {
		if f.v != nil {
			return fmt.Errorf("field %q (%s) is not replayed: kvgate bench sends each line at its timestamp, its prompt built from input_length and hash_ids", f.name, f.what)
		}
	}
	switch {
	case rec.Timestamp == nil:
		return errors.New("no timestamp: kvgate bench replays each line at its timestamp (ms)")
	case math.IsNaN(*rec.Timestamp) || math.IsInf(*rec.Timestamp, 0) || *rec.Timestamp < 0:
		return fmt.Errorf("timestamp %v: want a finite number of milliseconds ≥ 0", *rec.Timestamp)
	case rec.InputLength < 1 || rec.InputLength > maxTraceInputLength:
		return fmt.Errorf("input_length %d: want 1 to %d tokens", rec.InputLength, maxTraceInputLength)
	case rec.OutputLength < 0:
		return fmt.Errorf("output_length %d: want ≥ 0", rec.OutputLength)
	}
	return nil
}
