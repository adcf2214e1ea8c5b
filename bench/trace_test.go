package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadTraceRefuses: a trace line the replay cannot honour stops the
// read with its line number and the field at fault, rather than being
// replayed as something it is not (aiperf's session lines, for one, carry
// no timestamp and would all have been sent at once).
func TestReadTraceRefuses(t *testing.T) {
	ok := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}` + "\n"
	tests := []struct {
		name, line, want string
	}{
		{"a multi-turn session", `{"session_id": "a", "input_length": 300, "output_length": 40}`, `line 2: field "session_id"`},
		{"a delay", `{"timestamp": 5, "delay": 2, "input_length": 3, "output_length": 1}`, `line 2: field "delay"`},
		{"a literal prompt", `{"timestamp": 5, "text_input": "hi", "output_length": 1}`, `line 2: field "text_input"`},
		{"literal messages", `{"timestamp": 5, "messages": [], "output_length": 1}`, `line 2: field "messages"`},
		{"a literal payload", `{"timestamp": 5, "payload": {}, "output_length": 1}`, `line 2: field "payload"`},
		{"no timestamp", `{"input_length": 10, "output_length": 1}`, "line 2: no timestamp"},
		{"a negative timestamp", `{"timestamp": -1, "input_length": 10, "output_length": 1}`, "line 2: timestamp -1"},
		{"no input", `{"timestamp": 1, "output_length": 1}`, "line 2: input_length 0"},
		{"a negative input", `{"timestamp": 1, "input_length": -4, "output_length": 1}`, "line 2: input_length -4"},
		{"a huge input", `{"timestamp": 1, "input_length": 1000000000, "output_length": 1}`, "line 2: input_length 1000000000"},
		{"a negative output", `{"timestamp": 1, "input_length": 4, "output_length": -1}`, "line 2: output_length -1"},
		{"not JSON", `{"timestamp": 1,`, "line 2:"},
		{"a string timestamp", `{"timestamp": "1", "input_length": 4}`, "line 2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(ok+tt.line+"\n"), TraceConfig{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestReadTraceOrder: requests are sent in time order whatever the file's,
// --requests keeps the earliest, a line's filler does not depend on where
// the sort put it, and a refused field written as null counts as absent.
func TestReadTraceOrder(t *testing.T) {
	trace := `{"timestamp": 300, "input_length": 4, "output_length": 3}
{"timestamp": 100, "input_length": 5, "output_length": 1, "session_id": null, "delay": null}

{"timestamp": 200, "input_length": 6, "output_length": 2}
{"timestamp": 100, "input_length": 7, "output_length": 0}
`
	w, err := ReadTrace(strings.NewReader(trace), TraceConfig{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var lens []int
	var at []time.Duration
	for _, r := range w.Requests {
		lens = append(lens, len(r.Prompt))
		at = append(at, r.At)
	}
	if !slices.Equal(lens, []int{5, 7, 6}) || !slices.Equal(at, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Fatalf("prompt lengths %v at %v, want [5 7 6] at 100ms, 100ms, 200ms (stable, earliest three)", lens, at)
	}
	if w.Requests[1].Output != 1 {
		t.Fatalf("output_length 0 sent as %d tokens, want 1 (an engine generates at least one)", w.Requests[1].Output)
	}
	all, err := ReadTrace(strings.NewReader(trace), TraceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all.Requests[2].Prompt, w.Requests[2].Prompt) {
		t.Fatal("a line's prompt changed with --requests")
	}
}

// TestReadTraceBlockTokens: each hash id stands for BlockTokens tokens, the
// same ones wherever the id appears, and prompts are cut to input_length.
func TestReadTraceBlockTokens(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [7, 8, 9]}
{"timestamp": 1, "input_length": 20, "output_length": 1, "hash_ids": [7, 3]}
`
	for _, tt := range []struct {
		block, shared int
	}{
		{16, 16},
		{0, 20}, // the default, 512: both prompts lie inside block 7
	} {
		w, err := ReadTrace(strings.NewReader(trace), TraceConfig{BlockTokens: tt.block})
		if err != nil {
			t.Fatal(err)
		}
		a, b := w.Requests[0].Prompt, w.Requests[1].Prompt
		if len(a) != 40 || len(b) != 20 {
			t.Fatalf("block %d: prompt lengths %d, %d, want 40, 20", tt.block, len(a), len(b))
		}
		shared := 0
		for shared < len(b) && a[shared] == b[shared] {
			shared++
		}
		if shared != tt.shared {
			t.Fatalf("block %d: the prompts share %d leading tokens, want %d", tt.block, shared, tt.shared)
		}
	}
}
