package parse

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// toolCase is one answer in a family's documented format and what a
// client must end up with.
type toolCase struct {
	name   string
	tools  []string // declared functions; nil: any
	answer string
	want   Answer
}

// toolCases are the answers of every format, by format name.
func toolCases() map[string][]toolCase {
	return map[string][]toolCase{
		"hermes":      hermesCases,
		"llama3":      llamaCases,
		"mistral":     mistralCases,
		"deepseek_v3": deepseekCases,
		"harmony":     harmonyCases,
	}
}

// calls builds the expected calls, indexed from 0.
func calls(nameArgs ...string) []Call {
	var cs []Call
	for i := 0; i+1 < len(nameArgs); i += 2 {
		cs = append(cs, Call{Index: i / 2, Name: nameArgs[i], Arguments: nameArgs[i+1]})
	}
	return cs
}

// foldChecked folds the deltas of answer cut into chunks and checks the
// stream's own rules on the way: a name only on a call's first delta, a
// fragment only for the call being streamed, a retraction only of it, and
// Malformed whenever a retraction happens.
func foldChecked(t testing.TB, f ToolFormat, tools []string, chunks []string) Answer {
	t.Helper()
	p := NewToolParser(f, ToolOptions{Tools: tools})
	var fo Fold
	apply := func(d Delta) {
		t.Helper()
		for _, c := range d.Calls {
			n := len(fo.calls)
			last := n > 0 && fo.calls[n-1].index == c.Index
			switch {
			case c.Invalid && (!last || !d.Malformed):
				t.Fatalf("retraction of call %d, not the one streamed (or without Malformed): %+v", c.Index, d)
			case !c.Invalid && c.Name != "" && (last || c.Index != n):
				t.Fatalf("call %d named again or out of order (calls so far %d): %+v", c.Index, n, d)
			case !c.Invalid && c.Name == "" && !last:
				t.Fatalf("fragment of call %d, which was not announced: %+v", c.Index, d)
			}
			fo.Add(Delta{Calls: []CallDelta{c}})
		}
		d.Calls = nil
		fo.Add(d)
	}
	for _, c := range chunks {
		apply(p.Push(c))
	}
	apply(p.Flush())
	return fo.Answer()
}

func parseTools(t testing.TB, f ToolFormat, tools []string, chunks ...string) Answer {
	t.Helper()
	return foldChecked(t, f, tools, chunks)
}

func mustFormat(t testing.TB, name string) ToolFormat {
	t.Helper()
	f, err := ToolFormatNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestToolParsersParseAnswers(t *testing.T) {
	for format, cases := range toolCases() {
		f := mustFormat(t, format)
		for _, tc := range cases {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				got := parseTools(t, f, tc.tools, tc.answer)
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("answer %q\n got %#v\nwant %#v", tc.answer, got, tc.want)
				}
				for _, c := range got.Calls {
					if !json.Valid([]byte(c.Arguments)) || !strings.HasPrefix(c.Arguments, "{") {
						t.Fatalf("call %d arguments are not a JSON object: %q", c.Index, c.Arguments)
					}
				}
			})
		}
	}
}

// Every way of cutting an answer in two, rune by rune, byte by byte and
// random cuts into many pieces give the same Answer as the whole text.
func TestToolParsersAreTheSameForEveryChunking(t *testing.T) {
	for format, cases := range toolCases() {
		f := mustFormat(t, format)
		for ci, tc := range cases {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), 11))
				check := func(how string, chunks []string) {
					t.Helper()
					if got := parseTools(t, f, tc.tools, chunks...); !reflect.DeepEqual(got, tc.want) {
						t.Fatalf("%s %q\n got %#v\nwant %#v", how, chunks, got, tc.want)
					}
				}
				for i := 0; i <= len(tc.answer); i++ {
					check("split", []string{tc.answer[:i], tc.answer[i:]})
				}
				var runes, bytes []string
				for _, r := range tc.answer {
					runes = append(runes, string(r))
				}
				for i := range len(tc.answer) {
					bytes = append(bytes, tc.answer[i:i+1])
				}
				check("rune by rune", runes)
				check("byte by byte", bytes)
				for range 100 {
					check("random cuts", randomChunks(rng, tc.answer))
				}
			})
		}
	}
}

// Names and argument bytes come out while the answer streams, not at its
// end: after each byte, the arguments released so far are a prefix of
// the call's final arguments that grows with the text.
func TestToolParsersStreamArguments(t *testing.T) {
	for _, tc := range []struct{ format, answer, name, args, namedBy string }{
		{"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>", "get_weather", `{"city": "Paris", "days": 3}`, `"get_weather"`},
		{"llama3", `{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}`, "get_weather", `{"city": "Paris", "days": 3}`, `"get_weather"`},
		{"mistral", `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}`, "get_weather", `{"city": "Paris", "days": 3}`, mistralArgs},
		{"deepseek_v3", dsCallsBegin + dsCallBegin + "get_weather" + dsSep + `{"city": "Paris", "days": 3}` + dsCallEnd + dsCallsEnd, "get_weather", `{"city": "Paris", "days": 3}`, dsSep},
		{"deepseek_v3", dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n" + `{"city": "Paris", "days": 3}` + "\n```" + dsCallEnd + dsCallsEnd, "get_weather", `{"city": "Paris", "days": 3}`, "get_weather\n"},
		{"harmony", `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>`, "get_weather", `{"city": "Paris", "days": 3}`, hmMessage},
	} {
		t.Run(tc.format, func(t *testing.T) {
			p := NewToolParser(mustFormat(t, tc.format), ToolOptions{})
			var fo Fold
			// The arguments' value ends at its '}' (the wrapper's own '}'
			// and the end marker follow it).
			argsEnd := strings.Index(tc.answer, tc.args) + len(tc.args)
			namedBy := strings.Index(tc.answer, tc.namedBy) + len(tc.namedBy)
			for i := range len(tc.answer) {
				fo.Add(p.Push(tc.answer[i : i+1]))
				a := fo.Answer()
				if i+1 >= namedBy && (len(a.Calls) != 1 || a.Calls[0].Name != tc.name) {
					t.Fatalf("name not announced after %q: %+v", tc.answer[:i+1], a.Calls)
				}
				if i+1 < argsEnd {
					continue
				}
				if len(a.Calls) != 1 || a.Calls[0].Name != tc.name || a.Calls[0].Arguments != tc.args {
					t.Fatalf("after %q: %+v", tc.answer[:i+1], a.Calls)
				}
			}
			if i := strings.Index(tc.answer, "Paris") + len("Par"); !strings.Contains(streamedUpTo(t, tc.format, tc.answer[:i]), `"city": "Par`) {
				t.Fatalf("arguments held back: after %q only %q", tc.answer[:i], streamedUpTo(t, tc.format, tc.answer[:i]))
			}
		})
	}
}

// streamedUpTo is the arguments released after pushing prefix.
func streamedUpTo(t *testing.T, format, prefix string) string {
	p := NewToolParser(mustFormat(t, format), ToolOptions{})
	var fo Fold
	fo.Add(p.Push(prefix))
	a := fo.Answer()
	if len(a.Calls) == 0 {
		return ""
	}
	return a.Calls[0].Arguments
}

// Content is released as it arrives, holding back only a possible marker
// start.
func TestToolParsersReleaseContentAtOnce(t *testing.T) {
	for _, tc := range []struct{ format, text string }{
		{"hermes", "The weather in Paris is sunny, 21 degrees <tool"},
		{"mistral", "The weather in Paris is sunny, 21 degrees [TOOL_"},
		{"deepseek_v3", "The weather in Paris is sunny, 21 degrees <｜tool▁call"},
		{"llama3", "The weather in Paris is sunny, 21 degrees <tool"},
	} {
		p := NewToolParser(mustFormat(t, tc.format), ToolOptions{})
		var content strings.Builder
		for i := range len(tc.text) {
			content.WriteString(p.Push(tc.text[i : i+1]).Content)
		}
		want := "The weather in Paris is sunny, 21 degrees "
		if tc.format == "llama3" {
			want = tc.text
		}
		if content.String() != want {
			t.Errorf("%s: released %q while streaming, want %q", tc.format, content.String(), want)
		}
	}
}

func TestToolFormatNamed(t *testing.T) {
	for _, f := range ToolFormats() {
		g, err := ToolFormatNamed(f.Name)
		if err != nil || g.Name != f.Name || len(g.Markers()) == 0 {
			t.Fatalf("%s: %v, %v", f.Name, g, err)
		}
	}
	if _, err := ToolFormatNamed("pythonic"); err == nil || !strings.Contains(err.Error(), "hermes, llama3, mistral, deepseek_v3, harmony") {
		t.Fatalf("unknown name: %v", err)
	}
	if f := mustFormat(t, "harmony"); !f.HandlesReasoning() {
		t.Fatal("harmony carries its own reasoning")
	}
	if f := mustFormat(t, "hermes"); f.HandlesReasoning() {
		t.Fatal("hermes leaves reasoning to the <think> parser")
	}
}

// Excerpts of chat templates, written for this test, each with the
// markers its family's template renders tool calls with.
func TestDetectToolFormat(t *testing.T) {
	for _, tc := range []struct{ name, template, want string }{
		{"qwen2.5", `{%- for tool_call in message.tool_calls %}{{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '"}\n</tool_call>' }}{%- endfor %}`, "hermes"},
		{"hermes-3 on llama 3.1", `<|start_header_id|>system<|end_header_id|> You are a function calling AI. <tool_call>{"name": <function-name>}</tool_call> {{- '<|python_tag|>' if builtin_tools }}`, "hermes"},
		{"llama 3.1", `{%- if builtin_tools is defined %}{{- '<|python_tag|>' + tool_call.name + '.call(' }}{%- else %}{{- '{"name": "' + tool_call.name + '", "parameters": ' }}{%- endif %}`, "llama3"},
		{"mistral", `{%- elif message.tool_calls is defined %}{{- "[TOOL_CALLS][" }}{%- for tool_call in message.tool_calls %}{{- tool_call.function|tojson }}{%- endfor %}`, "mistral"},
		{"mistral v11", `{{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}`, "mistral"},
		{"deepseek v3", `{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '` + "```json" + `' + '\n' + tool['function']['arguments'] + '\n' + '` + "```" + `' + '<｜tool▁call▁end｜>'}}`, "deepseek_v3"},
		{"gpt-oss", `{{- "<|start|>assistant<|channel|>commentary to=functions." + tool_call.name + " <|constrain|>json<|message|>" + tool_call.arguments|tojson + "<|call|>" }}`, "harmony"},
		{"no tools", `{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}`, ""},
	} {
		f, ok := DetectToolFormat(tc.template)
		if got := map[bool]string{true: f.Name}[ok]; got != tc.want {
			t.Errorf("%s: detected %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzToolParserChunking: any text, in any format, cut anywhere, parses as
// the whole does, without a panic, and releases valid UTF-8 when given it.
func FuzzToolParserChunking(f *testing.F) {
	formats := ToolFormats()
	for _, cases := range toolCases() {
		for _, tc := range cases {
			for i := range formats {
				f.Add(tc.answer, uint8(i), uint64(len(tc.answer)/2), len(tc.tools) > 0)
			}
		}
	}
	f.Fuzz(func(t *testing.T, answer string, format uint8, seed uint64, declared bool) {
		tf := formats[int(format)%len(formats)]
		var tools []string
		if declared {
			tools = []string{"get_weather", "f"}
		}
		whole := parseTools(t, tf, tools, answer)
		if chunked := parseTools(t, tf, tools, randomChunks(rand.New(rand.NewPCG(seed, 7)), answer)...); !reflect.DeepEqual(whole, chunked) {
			t.Fatalf("whole %#v\nchunked %#v", whole, chunked)
		}
		cut := int(seed % uint64(len(answer)+1))
		if split := parseTools(t, tf, tools, answer[:cut], answer[cut:]); !reflect.DeepEqual(whole, split) {
			t.Fatalf("whole %#v\nsplit at %d %#v", whole, cut, split)
		}
		for _, c := range whole.Calls {
			if !json.Valid([]byte(c.Arguments)) || !strings.HasPrefix(c.Arguments, "{") {
				t.Fatalf("call arguments are not a JSON object: %q", c.Arguments)
			}
		}
		if utf8.ValidString(answer) && (!utf8.ValidString(whole.Content) || !utf8.ValidString(whole.Reasoning)) {
			t.Fatalf("invalid UTF-8 out of valid input: %#v", whole)
		}
	})
}

// benchAnswer is about size bytes of content followed by calls with long
// arguments, in format f.
func benchAnswer(f string, size int) string {
	var b strings.Builder
	args := `{"city": "Paris", "note": "` + strings.Repeat("sunny \\\"warm\\\" é ", 40) + `", "days": [1, 2, 3.5e2, true, null]}`
	for b.Len() < size {
		b.WriteString("Some plain text about the weather, with <angle> [brackets] and {braces}.\n")
		switch f {
		case "hermes":
			b.WriteString("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>\n")
		case "mistral":
			b.WriteString("[TOOL_CALLS]get_weather[ARGS]" + args)
		case "deepseek_v3":
			b.WriteString(dsCallsBegin + dsCallBegin + "get_weather" + dsSep + args + dsCallEnd + dsCallsEnd)
		case "harmony":
			b.WriteString("<|channel|>analysis<|message|>Thinking about it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + args + "<|call|>")
		}
	}
	if f == "llama3" {
		var calls []string
		for n := 0; n*len(args) < size; n++ {
			calls = append(calls, `{"name": "get_weather", "parameters": `+args+`}`)
		}
		return strings.Join(calls, "; ")
	}
	return b.String()
}

// BenchmarkToolParserByteByByte pushes a 1 MB answer one byte at a time:
// the cost per byte must not grow with the answer.
// It runs at 64 KB too: equal MB/s at both sizes is what linear means.
func BenchmarkToolParserByteByByte(b *testing.B) {
	for _, f := range ToolFormats() {
		for _, size := range []int{64 << 10, 1 << 20} {
			answer := benchAnswer(f.Name, size)
			b.Run(fmt.Sprintf("%s/%dKB", f.Name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(answer)))
				for range b.N {
					p := NewToolParser(f, ToolOptions{Tools: []string{"get_weather"}})
					var a Answer
					for i := range len(answer) {
						d := p.Push(answer[i : i+1])
						if len(d.Calls) > 0 || d.Malformed {
							a.Malformed = a.Malformed || d.Malformed
						}
					}
					if p.Flush(); a.Malformed {
						b.Fatal("malformed")
					}
				}
			})
		}
	}
}

func ExampleToolParser() {
	p := NewToolParser(ToolFormats()[0], ToolOptions{Tools: []string{"get_weather"}})
	var fo Fold
	for _, chunk := range []string{"Checking.\n<tool", "_call>\n{\"name\": \"get_weather\", ", `"arguments": {"city": "Paris"}}`, "\n</tool_call>"} {
		fo.Add(p.Push(chunk))
	}
	fo.Add(p.Flush())
	a := fo.Answer()
	fmt.Printf("%q %+v\n", a.Content, a.Calls)
	// Output: "Checking.\n" [{Index:0 Name:get_weather Arguments:{"city": "Paris"}}]
}

// The parser holds back no more than it must: after each byte, the input
// it has neither released nor consumed as a call's text is shorter than
// its longest marker (a harmony header, at most maxHeaderLen bytes, is
// held whole). Whitespace kept aside for trimming is not counted.
func TestToolParsersHoldBackOnlyWhatTheyMust(t *testing.T) {
	for format, cases := range toolCases() {
		f := mustFormat(t, format)
		bound := 0
		for _, m := range f.Markers() {
			bound = max(bound, len(m))
		}
		if f.HandlesReasoning() {
			bound = maxHeaderLen + len(hmMessage)
		}
		for _, tc := range cases {
			p := NewToolParser(f, ToolOptions{Tools: tc.tools})
			for i := range len(tc.answer) {
				p.Push(tc.answer[i : i+1])
				if held := len(p.in) + len(p.partial); held > bound {
					t.Fatalf("%s/%s: after %q it holds %q", format, tc.name, tc.answer[:i+1], p.in)
				}
			}
		}
	}
}

// hostileAnswers are answers of about size bytes written to find a
// quadratic path: whitespace a format holds while it decides (llama3's
// leading whitespace, after mistral's [TOOL_CALLS]), nesting up to the
// depth bound, a marker repeated without end, a string that never closes.
func hostileAnswers(size int) []struct{ name, answer string } {
	var out []struct{ name, answer string }
	for _, h := range []struct{ name, prefix, unit string }{
		{"spaces", "", " "},
		{"after-marker", "[TOOL_CALLS]", " "},
		{"nesting", "", "<tool_call>" + strings.Repeat("[", maxJSONDepth) + "]"},
		{"markers", "", "<tool_call>{<|start|>" + dsCallBegin},
		{"long-string", `<tool_call>{"name": "f", "arguments": {"a": "`, "x"},
		{"harmony-heads", "", "<|channel|>analysis<|message|>"},
	} {
		out = append(out, struct{ name, answer string }{h.name, h.prefix + strings.Repeat(h.unit, size/len(h.unit)+1)})
	}
	return out
}

// BenchmarkToolParserHostile pushes answers written to find a quadratic
// path, byte by byte, at 64 KB and 1 MB: whitespace a format holds while
// it decides (llama3's leading whitespace, after mistral's [TOOL_CALLS]),
// nesting up to the depth bound, and a marker repeated without end.
func BenchmarkToolParserHostile(b *testing.B) {
	for _, f := range ToolFormats() {
		for _, size := range []int{64 << 10, 1 << 20} {
			for _, h := range hostileAnswers(size) {
				answer := h.answer
				b.Run(fmt.Sprintf("%s/%s/%dKB", f.Name, h.name, size>>10), func(b *testing.B) {
					b.SetBytes(int64(len(answer)))
					for range b.N {
						p := NewToolParser(f, ToolOptions{})
						for i := range len(answer) {
							p.Push(answer[i : i+1])
						}
						p.Flush()
					}
				})
			}
		}
	}
}
