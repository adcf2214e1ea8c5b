package parse

// harmonyCases are gpt-oss answers in the harmony format, as they follow
// the prompt's <|start|>assistant.
var harmonyCases = []toolCase{
	{name: "analysis, then final",
		answer: "<|channel|>analysis<|message|>User asks the capital. It is Paris.<|end|><|start|>assistant<|channel|>final<|message|>The capital of France is Paris.<|return|>",
		want:   Answer{Reasoning: "User asks the capital. It is Paris.", Content: "The capital of France is Paris."}},
	{name: "analysis, then a tool call",
		answer: "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
		want:   Answer{Reasoning: "User wants weather.", Calls: calls("get_weather", `{"city":"Paris"}`)}},
	{name: "the recipient before the channel",
		answer: "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>\n{\"city\": \"Paris\"}\n<|call|>",
		want:   Answer{Reasoning: "Need the tool.", Calls: calls("get_weather", `{"city": "Paris"}`)}},
	{name: "final only", answer: "<|channel|>final<|message|>Hello!<|return|>",
		want: Answer{Content: "Hello!"}},
	{name: "a preamble on commentary, then two calls",
		answer: "<|channel|>commentary<|message|>Let me check both.<|end|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>",
		want: Answer{Content: "Let me check both.", Calls: calls("get_weather", `{"city": "Paris"}`, "get_time", `{}`)}},
	{name: "nested arguments with marker-like text, escapes and unicode",
		answer: "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"q\": \"<|call|> <|end|> \\\"quoted\\\" ☀️\", \"o\": {\"l\": [[], {}, [\"\\u0041\"]]}}<|call|>",
		want:   Answer{Calls: calls("search", `{"q": "<|call|> <|end|> \"quoted\" ☀️", "o": {"l": [[], {}, ["\u0041"]]}}`)}},
	{name: "invalid JSON is the call's text",
		answer: "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": Paris}<|call|>",
		want: Answer{Reasoning: "Call it.", Malformed: true,
			Content: "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": Paris}<|call|>"}},
	{name: "an undeclared name; the next message still parses", tools: []string{"get_weather"},
		answer: "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
		want:   Answer{Content: "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|>Done.", Malformed: true}},
	{name: "the answer ends mid-call",
		answer: "<|channel|>analysis<|message|>Go.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"ci",
		want:   Answer{Reasoning: "Go.", Content: "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"ci", Malformed: true}},
	{name: "a built-in tool is not a function",
		answer: "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>analysis to=browser.search <|constrain|>json<|message|>{\"query\": \"x\"}<|call|>",
		want:   Answer{Reasoning: "Search.", Content: "<|start|>assistant<|channel|>analysis to=browser.search <|constrain|>json<|message|>{\"query\": \"x\"}<|call|>", Malformed: true}},
	{name: "cut off while thinking", answer: "<|channel|>analysis<|message|>Let me think about <|en",
		want: Answer{Reasoning: "Let me think about <|en"}},
	{name: "text that is not harmony is content", answer: "Hello there.",
		want: Answer{Content: "Hello there."}},
}
