package template

import (
	"fmt"
	"strings"
	"testing"
)

// TestRealTemplatesStayWithinTheBounds: each real chat template of the
// cases, given as large a conversation as the router takes (10,000
// messages and 1,024 tools), renders without passing a bound of the
// renderer (it may raise its own error, as some refuse role orders); the
// most steps any takes is logged, against maxSteps.
func TestRealTemplatesStayWithinTheBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("renders every case's template over 10,000 messages")
	}
	const messages, tools = 10000, 1024
	conv := make([]any, 0, messages)
	conv = append(conv, msg("system", "be brief"))
	for i := 1; i < messages; i++ {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		conv = append(conv, msg(role, fmt.Sprintf("message %d", i)))
	}
	var ts []any
	for i := range tools {
		fn := NewOrderedMap()
		fn.Set("name", fmt.Sprintf("tool_%d", i))
		fn.Set("description", "a tool")
		params := NewOrderedMap()
		params.Set("type", "object")
		params.Set("properties", NewOrderedMap())
		fn.Set("parameters", params)
		tool := NewOrderedMap()
		tool.Set("type", "function")
		tool.Set("function", fn)
		ts = append(ts, tool)
	}
	most, mostName := 0, ""
	for _, c := range loadCases(t) {
		tp, err := Compile(c.template)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		vars := varsOf(c.data)
		vars["messages"], vars["tools"], vars["add_generation_prompt"] = conv, ts, true
		r := &renderer{now: fixedNow}
		_, err = tp.renderWith(r, vars)
		if err != nil && strings.Contains(err.Error(), "MemoryError") {
			t.Errorf("%s: %v", c.name, err)
		}
		if r.steps > most {
			most, mostName = r.steps, c.name
		}
	}
	t.Logf("the most steps: %d (%s), the bound %d", most, mostName, maxSteps)
}

func msg(role, content string) *OrderedMap {
	m := NewOrderedMap()
	m.Set("role", role)
	m.Set("content", content)
	return m
}
