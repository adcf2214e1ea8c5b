package parse

// deepseekCases are answers in the DeepSeek-V3 (with its type and fence)
// and V3.1 forms.
var deepseekCases = []toolCase{
	{name: "plain content", answer: "The capital of France is Paris.",
		want: Answer{Content: "The capital of France is Paris."}},
	{name: "v3: one call",
		answer: dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + dsCallEnd + dsCallsEnd,
		want:   Answer{Calls: calls("get_weather", `{"city": "Paris"}`)}},
	{name: "v3: content before, two calls",
		answer: "Let me check.\n\n" + dsCallsBegin +
			dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + dsCallEnd + "\n" +
			dsCallBegin + "function" + dsSep + "get_time\n```json\n{}\n```" + dsCallEnd + dsCallsEnd,
		want: Answer{Content: "Let me check.\n\n", Calls: calls("get_weather", `{"city": "Paris"}`, "get_time", `{}`)}},
	{name: "v3.1: two calls, content after",
		answer: dsCallsBegin + dsCallBegin + "get_weather" + dsSep + `{"city": "Paris"}` + dsCallEnd +
			dsCallBegin + "get_weather" + dsSep + `{"city": "London"}` + dsCallEnd + dsCallsEnd + "\nDone.",
		want: Answer{Content: "Done.", Calls: calls("get_weather", `{"city": "Paris"}`, "get_weather", `{"city": "London"}`)}},
	{name: "v3.1: a call without the calls' wrapper",
		answer: "Sure." + dsCallBegin + "now" + dsSep + "{}" + dsCallEnd,
		want:   Answer{Content: "Sure.", Calls: calls("now", `{}`)}},
	{name: "v3.1: a function called function",
		answer: dsCallBegin + "function" + dsSep + `{"x": 1}` + dsCallEnd,
		want:   Answer{Calls: calls("function", `{"x": 1}`)}},
	{name: "nested arguments with marker-like text, escapes and unicode",
		answer: dsCallsBegin + dsCallBegin + "function" + dsSep + "search\n```json\n{\"q\": \"" + dsCallEnd + " ``` \\\"x\\\" 深度 \\u6c42\", \"f\": {\"a\": [{\"b\": [1e-3]}]}}\n```" + dsCallEnd + dsCallsEnd,
		want:   Answer{Calls: calls("search", `{"q": "`+dsCallEnd+` `+"```"+` \"x\" 深度 \u6c42", "f": {"a": [{"b": [1e-3]}]}}`)}},
	{name: "v3: invalid JSON is its call's text; the next call parses",
		answer: dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": Paris}\n```" + dsCallEnd +
			dsCallBegin + "function" + dsSep + "get_time\n```json\n{}\n```" + dsCallEnd + dsCallsEnd,
		want: Answer{Content: dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": Paris}\n```" + dsCallEnd,
			Calls: calls("get_time", `{}`), Malformed: true}},
	{name: "v3.1: an undeclared name", tools: []string{"get_weather"},
		answer: dsCallsBegin + dsCallBegin + "rm" + dsSep + `{"path": "/"}` + dsCallEnd + dsCallBegin + "get_weather" + dsSep + `{"city": "Paris"}` + dsCallEnd + dsCallsEnd,
		want: Answer{Content: dsCallBegin + "rm" + dsSep + `{"path": "/"}` + dsCallEnd,
			Calls: calls("get_weather", `{"city": "Paris"}`), Malformed: true}},
	{name: "the end marker before the JSON ends",
		answer: dsCallBegin + "get_weather" + dsSep + `{"city": "Paris"` + dsCallEnd + dsCallsEnd + "ok",
		want:   Answer{Content: dsCallBegin + "get_weather" + dsSep + `{"city": "Paris"` + dsCallEnd + "ok", Malformed: true}},
	{name: "the answer ends mid-call",
		answer: dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"ci",
		want:   Answer{Content: dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"ci", Malformed: true}},
	{name: "v3: only the closing fence and markers missing",
		answer: dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n",
		want:   Answer{Calls: calls("get_weather", `{"city": "Paris"}`)}},
}
