package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
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
		{"a token outside the vocabulary of an engine that truncates",
			validateAgainst(make([]uint32, 20000), &kvgatev1.SamplingParams{StopTokenIds: []uint32{100}}, limits{vocabSize: 100, maxContext: 10, truncates: true}),
			"sampling_params.stop_token_ids[0]", "below the model's vocab_size 100"},
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

// engine is a worker of the fit tests: its own length limits, and whether
// it passes its health checks.
type engine struct {
	context, input int
	truncates      bool
	down           bool
}

func fleetOf(es []engine) []*workers.Worker {
	ws := make([]*workers.Worker, len(es))
	for i, e := range es {
		ws[i] = workers.NewWorker(fmt.Sprintf("w%d", i), workers.ProtocolSGLang, workers.RoleRegular,
			workers.ModelInfo{MaxContextLength: e.context, MaxInputTokens: e.input, TruncatesPrompts: e.truncates}, nil, nil)
		ws[i].SetHealthy(!e.down)
	}
	return ws
}

// TestFitPlacesOnlyWhereThePromptFits: in a fleet whose engines accept
// different lengths (SGLang engines with KV caches of different sizes), a
// prompt that some healthy engine accepts is placed only among those that
// do; one that no healthy engine accepts is refused, naming the field and
// the largest limit.
func TestFitPlacesOnlyWhereThePromptFits(t *testing.T) {
	small, large := engine{context: 8192, input: 1023}, engine{context: 8192, input: 4095}
	tests := []struct {
		name     string
		fleet    []engine
		prompt   int
		maxNew   *uint32
		embed    bool     // an Embed input of prompt tokens
		before   []string // excluded by earlier attempts
		excluded []string
		note     string // part of LeftOut, when some are left out
		field    string // "": accepted
		msg      string
	}{
		{name: "a prompt every engine accepts", fleet: []engine{small, large}, prompt: 1000},
		{name: "a prompt only the larger engines accept", fleet: []engine{small, large, small, large}, prompt: 1500,
			excluded: []string{"w0", "w2"}},
		{name: "a prompt no engine accepts names the largest limit", fleet: []engine{small, large}, prompt: 5000,
			field: "input_ids", msg: "at most 4095"},
		{name: "the larger engine down", fleet: []engine{small, {context: 8192, input: 4095, down: true}}, prompt: 1500,
			field: "input_ids", msg: "at most 1023"},
		{name: "an engine that reports no input limit", fleet: []engine{small, {context: 8192}}, prompt: 5000,
			excluded: []string{"w0"}},
		{name: "an engine that reports no limit at all", fleet: []engine{large, {}}, prompt: 100000,
			excluded: []string{"w0"}},
		{name: "max_new_tokens beyond one engine's context", fleet: []engine{{context: 2048}, {context: 8192}}, prompt: 1000,
			maxNew: u32p(2000), excluded: []string{"w0"}},
		{name: "max_new_tokens beyond every context", fleet: []engine{{context: 2048}, {context: 8192}}, prompt: 1000,
			maxNew: u32p(8000), field: "sampling_params.max_new_tokens", msg: "context is 8192"},
		{name: "each engine refuses for a limit the other exceeds",
			fleet: []engine{{context: 8192, input: 1023}, {context: 1024, input: 4095}}, prompt: 1500,
			field: "input_ids", msg: "at most 1023"},
		{name: "many engines left out are counted", fleet: []engine{small, small, small, small, small, large}, prompt: 1500,
			excluded: []string{"w0", "w1", "w2", "w3", "w4"}, note: "w0, w1, w2 and 2 more (the prompt (input_ids) has 1500 tokens; the engines accept at most 1023"},
		{name: "a worker already excluded is listed once", fleet: []engine{small, large}, prompt: 1500,
			before: []string{"w0"}, excluded: []string{"w0"}, note: "at most 1023"},
		{name: "an embedding may use the token kept for output", fleet: []engine{small, large}, prompt: 1024, embed: true},
		{name: "an embedding beyond it", fleet: []engine{small, large}, prompt: 1025, embed: true,
			excluded: []string{"w0"}},
		{name: "an engine that truncates takes any length", fleet: []engine{small, {context: 8192, input: 1023, truncates: true}},
			prompt: 100000, maxNew: u32p(100000), excluded: []string{"w0"}},
		{name: "every engine truncates", fleet: []engine{{context: 8192, input: 1023, truncates: true}, {context: 8192, input: 4095, truncates: true}},
			prompt: 100000},
		{name: "an embedding on an engine that truncates", fleet: []engine{small, {context: 8192, input: 1023, truncates: true}},
			prompt: 9000, embed: true, excluded: []string{"w0"}},
		{name: "no healthy engine: the placement says so", fleet: []engine{{context: 10, down: true}}, prompt: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &Job{InputIDs: make([]uint32, tt.prompt), failed: slices.Clone(tt.before)}
			if tt.maxNew != nil {
				j.Sampling = &kvgatev1.SamplingParams{MaxNewTokens: tt.maxNew}
			}
			j.Task = (&Pipeline{}).Generation(j)
			if tt.embed {
				j.Task = &Embedding{inputs: [][]uint32{j.InputIDs}}
			}
			ws := fleetOf(tt.fleet)
			err := fit(workers.RoleRegular, ws, boundsOf(ws), j)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("fit: %v; want it accepted", err)
				}
			} else if f, ok := fault.As(err); !ok || f.Kind != fault.Invalid || f.Field != tt.field || !strings.Contains(f.Msg, tt.msg) {
				t.Fatalf("fit: %v; want an invalid-request fault about %s saying %q", err, tt.field, tt.msg)
			}
			if !slices.Equal(j.excluded(), tt.excluded) {
				t.Errorf("excluded %v; want %v", j.excluded(), tt.excluded)
			}
			note, leftOut := j.LeftOut(), tt.note != "" || len(tt.excluded) > len(tt.before)
			switch {
			case !leftOut && note != "":
				t.Errorf("LeftOut %q; want none, no worker was left out for its limits", note)
			case leftOut && (!strings.Contains(note, "left out for their limits: "+tt.excluded[0]) || !strings.Contains(note, tt.note)):
				t.Errorf("LeftOut %q; want it to name %s and say %q", note, tt.excluded[0], tt.note)
			}
		})
	}
}

// TestLeftOutNamesEachLegsLatestCheck: a disaggregated request is checked
// against its prefill engines and its decode engines, before the queue and
// again at each placement. Explain and the log name what each leg's latest
// check left out, and the request is kept from those engines only: the
// decode leg's check does not hide the prefill leg's, and a check that
// leaves none out (the small engines replaced, or restarted with larger
// limits) clears what an earlier one said and lets the request go there.
func TestLeftOutNamesEachLegsLatestCheck(t *testing.T) {
	small, large := engine{context: 8192, input: 1023}, engine{context: 8192, input: 4095}
	named := func(prefix string, es ...engine) []*workers.Worker {
		ws := make([]*workers.Worker, len(es))
		for i, e := range es {
			ws[i] = workers.NewWorker(fmt.Sprintf("%s%d", prefix, i), workers.ProtocolSGLang, workers.RoleRegular,
				workers.ModelInfo{MaxContextLength: e.context, MaxInputTokens: e.input}, nil, nil)
		}
		return ws
	}
	j := &Job{InputIDs: make([]uint32, 1500), failed: []string{"f0"}}
	j.Task = (&Pipeline{}).Generation(j)
	steps := []struct {
		role     workers.Role
		fleet    []*workers.Worker
		want     []string // parts of LeftOut
		wantNone []string // not in it
		excluded []string // the workers kept from the request after it
	}{
		{role: workers.RolePrefill, fleet: named("p", small, large),
			want:     []string{"prefill engines left out for their limits: p0 ("},
			excluded: []string{"f0", "p0"}},
		{role: workers.RoleDecode, fleet: named("d", large, small, small),
			want:     []string{"prefill engines left out for their limits: p0 (", "; decode engines left out for their limits: d1, d2 ("},
			excluded: []string{"f0", "p0", "d1", "d2"}},
		{role: workers.RolePrefill, fleet: named("p", large, large), // p0 restarted larger
			want: []string{"decode engines left out for their limits: d1, d2 ("}, wantNone: []string{"prefill", "p0"},
			excluded: []string{"f0", "d1", "d2"}},
		{role: workers.RoleDecode, fleet: named("e", large),
			wantNone: []string{"left out"},
			excluded: []string{"f0"}},
	}
	for i, st := range steps {
		if err := fit(st.role, st.fleet, boundsOf(st.fleet), j); err != nil {
			t.Fatalf("step %d: fit: %v; want it accepted", i, err)
		}
		note := j.LeftOut()
		for _, w := range st.want {
			if !strings.Contains(note, w) {
				t.Errorf("step %d: LeftOut %q; want it to say %q", i, note, w)
			}
		}
		for _, w := range st.wantNone {
			if strings.Contains(note, w) {
				t.Errorf("step %d: LeftOut %q; want no %q", i, note, w)
			}
		}
		if got := j.excluded(); !slices.Equal(got, st.excluded) {
			t.Errorf("step %d: excluded %v; want %v", i, got, st.excluded)
		}
	}
}

// FuzzFit: whatever the fleet's limits and health, fit accepts a prompt
// exactly when some healthy engine's own limits hold it, and then excludes
// only engines whose limits do not.
func FuzzFit(f *testing.F) {
	f.Add([]byte{10, 0, 9, 0, 1, 40, 0, 39, 0, 1}, uint16(20), uint16(5), true)
	f.Add([]byte{0, 0, 0, 0, 0}, uint16(1), uint16(0), false)
	f.Fuzz(func(t *testing.T, spec []byte, prompt, maxNew uint16, setMax bool) {
		// Five bytes an engine: context and input limit (little-endian,
		// 0 none), and whether it is up and truncates long prompts.
		var fleet []engine
		for i := 0; i+5 <= len(spec) && len(fleet) < 6; i += 5 {
			fleet = append(fleet, engine{context: int(spec[i]) | int(spec[i+1])<<8, input: int(spec[i+2]) | int(spec[i+3])<<8,
				down: spec[i+4]&1 == 0, truncates: spec[i+4]&2 != 0})
		}
		j := &Job{InputIDs: make([]uint32, prompt%4096)}
		if setMax {
			j.Sampling = &kvgatev1.SamplingParams{MaxNewTokens: u32p(uint32(maxNew))}
		}
		j.Task = (&Pipeline{}).Generation(j)
		ws := fleetOf(fleet)
		err := fit(workers.RoleRegular, ws, boundsOf(ws), j)
		if err != nil {
			if f, ok := fault.As(err); !ok || f.Kind != fault.Invalid || f.Field == "" {
				t.Fatalf("fit: %v; want an invalid-request fault naming its field", err)
			}
		}
		healthyFits := false
		for _, w := range ws {
			own := j.Task.check(lengthsOf(w))
			if slices.Contains(j.excluded(), w.URL()) && own == nil {
				t.Fatalf("%s excluded, but its limits %+v hold the prompt", w.URL(), w.Info())
			}
			if own == nil && w.Healthy() {
				healthyFits = true
			}
		}
		anyHealthy := slices.ContainsFunc(ws, (*workers.Worker).Healthy)
		if anyHealthy && healthyFits != (err == nil) {
			t.Fatalf("fit: %v, while a healthy engine holds the prompt: %v", err, healthyFits)
		}
	})
}

func u32p(v uint32) *uint32 { return &v }
