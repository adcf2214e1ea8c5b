package constraint

import (
	"fmt"
	"strconv"
	"strings"
)

// CheckStructuralTag reports whether s is a structural tag the engines accept,
// in either of its two shapes.
//
// SGLang's form (response_format in SGLang's "Structured Outputs" docs,
// docs/advanced_features/structured_outputs.ipynb, and vLLM's
// openai_chat_completion_structured_outputs_structural_tag example):
//
//	{"type": "structural_tag",
//	 "structures": [{"begin": "<function=get_weather>", "schema": {...}, "end": "</function>"}],
//	 "triggers": ["<function="]}
//
// Checked: structures is an array of objects with string begin and end and a
// schema that passes CheckJSONSchema; triggers is a non-empty array of
// non-empty strings; every structure's begin starts with some trigger (the
// engine switches to the structure only after a trigger, so a begin no
// trigger starts can never be generated).
//
// xgrammar's newer form (docs/structural_tag/structural_tag.md):
//
//	{"type": "structural_tag", "format": {"type": "triggered_tags", ...}}
//
// Checked: format is an object with a string type. For the format types that
// document lists, the fields it marks required are checked and nested formats
// are walked: const_string (value), json_schema (json_schema, checked as a
// schema), grammar (grammar, checked by CheckEBNF), regex (pattern, checked by
// CheckRegex), sequence and or (non-empty elements), optional, plus, star and
// repeat (content; repeat's min and max), tag (begin, content, end),
// triggered_tags (triggers, tags), tags_with_separator (tags, separator) and
// dispatch (rules of [string, format]). Other types (any_text, the token-level
// formats, and types newer than this check) are accepted as they are, so that
// an xgrammar upgrade on the workers does not need a router upgrade.
//
// Errors name the JSON pointer: at /structures/1/begin: "<tool>" does not
// start with any trigger.
func CheckStructuralTag(s string, lim Limits) error {
	lim = lim.withDefaults()
	if err := lim.checkSize("the structural tag", s); err != nil {
		return err
	}
	root, err := parseJSON(s, lim)
	if err != nil {
		return err
	}
	if root.kind != jObject {
		return fmt.Errorf("at the root: a structural tag must be an object, not %s", root.kind)
	}
	if t := root.get("type"); t == nil || t.kind != jString || t.str != "structural_tag" {
		return fmt.Errorf(`at /type: want "structural_tag"`)
	}
	st := &stagChecker{lim: lim}
	if f := root.get("format"); f != nil {
		return st.format(f, "/format")
	}
	if root.get("structures") == nil {
		return fmt.Errorf(`at the root: want "format" (xgrammar) or "structures" and "triggers" (SGLang)`)
	}
	return st.legacy(root)
}

type stagChecker struct{ lim Limits }

func stagErr(ptr, format string, args ...any) error {
	return fmt.Errorf("at %s: %s", ptr, fmt.Sprintf(format, args...))
}

// legacy checks SGLang's structures + triggers form.
func (st *stagChecker) legacy(root *jval) error {
	triggers := root.get("triggers")
	if triggers == nil || triggers.kind != jArray || len(triggers.arr) == 0 {
		return stagErr("/triggers", "want a non-empty array of strings")
	}
	for i, t := range triggers.arr {
		if t.kind != jString || t.str == "" {
			return stagErr("/triggers/"+strconv.Itoa(i), "want a non-empty string, not %s", t.describe())
		}
	}
	structures := root.get("structures")
	if structures.kind != jArray {
		return stagErr("/structures", "want an array, not %s", structures.kind)
	}
	for i, s := range structures.arr {
		ptr := "/structures/" + strconv.Itoa(i)
		if s.kind != jObject {
			return stagErr(ptr, "a structure must be an object, not %s", s.kind)
		}
		begin, end := s.get("begin"), s.get("end")
		if begin == nil || begin.kind != jString || begin.str == "" {
			return stagErr(ptr+"/begin", "want a non-empty string")
		}
		if end == nil || end.kind != jString {
			return stagErr(ptr+"/end", "want a string")
		}
		started := false
		for _, t := range triggers.arr {
			if strings.HasPrefix(begin.str, t.str) {
				started = true
				break
			}
		}
		if !started {
			return stagErr(ptr+"/begin", "%s does not start with any trigger", begin.describe())
		}
		schema := s.get("schema")
		if schema == nil {
			return stagErr(ptr, "a structure needs a schema")
		}
		if err := checkSchemaValue(schema, ptr+"/schema", st.lim); err != nil {
			return err
		}
	}
	return nil
}

// format checks one xgrammar format object; its recursion follows the JSON
// nesting the parser bounded.
func (st *stagChecker) format(f *jval, ptr string) error {
	if f.kind != jObject {
		return stagErr(ptr, "a format must be an object, not %s", f.kind)
	}
	t := f.get("type")
	if t == nil || t.kind != jString {
		return stagErr(ptr, "a format needs a string type")
	}
	str := func(key string) (*jval, error) {
		v := f.get(key)
		if v == nil || v.kind != jString {
			return nil, stagErr(ptr+"/"+key, "%s needs a string %s", t.str, key)
		}
		return v, nil
	}
	sub := func(key string) error {
		v := f.get(key)
		if v == nil {
			return stagErr(ptr, "%s needs %s", t.str, key)
		}
		return st.format(v, ptr+"/"+key)
	}
	list := func(key string, each func(*jval, string) error) error {
		v := f.get(key)
		if v == nil || v.kind != jArray || len(v.arr) == 0 {
			return stagErr(ptr+"/"+key, "%s needs a non-empty array %s", t.str, key)
		}
		for i, el := range v.arr {
			if err := each(el, ptr+"/"+key+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		return nil
	}
	switch t.str {
	case "const_string":
		_, err := str("value")
		return err
	case "json_schema":
		v := f.get("json_schema")
		if v == nil {
			return stagErr(ptr, "json_schema needs json_schema")
		}
		return checkSchemaValue(v, ptr+"/json_schema", st.lim)
	case "grammar":
		v, err := str("grammar")
		if err != nil {
			return err
		}
		if err := CheckEBNF(v.str, st.lim); err != nil {
			return stagErr(ptr+"/grammar", "%v", err)
		}
	case "regex":
		v, err := str("pattern")
		if err != nil {
			return err
		}
		if err := checkRegex(v.str, st.lim); err != nil {
			return stagErr(ptr+"/pattern", "%v", err)
		}
	case "sequence", "or":
		return list("elements", st.format)
	case "optional", "plus", "star":
		return sub("content")
	case "repeat":
		for _, k := range []string{"min", "max"} {
			if v := f.get(k); v == nil || v.kind != jNumber {
				return stagErr(ptr+"/"+k, "repeat needs a number %s", k)
			}
		}
		return sub("content")
	case "tag":
		for _, k := range []string{"begin", "end"} {
			if f.get(k) == nil {
				return stagErr(ptr, "tag needs %s", k)
			}
		}
		return sub("content")
	case "triggered_tags", "tags_with_separator":
		if t.str == "triggered_tags" {
			if err := list("triggers", func(v *jval, p string) error {
				if v.kind != jString || v.str == "" {
					return stagErr(p, "want a non-empty string, not %s", v.describe())
				}
				return nil
			}); err != nil {
				return err
			}
		} else if _, err := str("separator"); err != nil {
			return err
		}
		return list("tags", st.format)
	case "dispatch":
		return list("rules", func(v *jval, p string) error {
			if v.kind != jArray || len(v.arr) != 2 || v.arr[0].kind != jString {
				return stagErr(p, "a dispatch rule is [pattern string, format]")
			}
			return st.format(v.arr[1], p+"/1")
		})
	}
	return nil
}
