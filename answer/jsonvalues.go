package answer

import (
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/tokenize/template"
)

// JSON fields of a Chat request (chat_template_kwargs, a tool's parameters,
// a tool call's arguments) arrive as google.protobuf.Struct and Value and
// become template values here, with the limits template.DecodeJSON holds
// JSON text to: every later step that walks a value (rendering, tojson,
// comparison) recurses once per level, so the depth is bounded where the
// data enters.
//
// A Struct is a map and keeps no key order; on the wire its entries come in
// whatever order the client's protobuf runtime iterates its map (random in
// Go, hash order in C++). Templates print tool schemas and arguments with
// tojson, which keeps a dict's order, so kvgate sorts the keys at every
// level: the same request always renders to the same prompt, and so to the
// same cached prefix, whichever language sent it. It is the rendering
// transformers gives the same JSON with its keys sorted.

// jsonConverter turns Struct and Value trees into template values, counting
// the bytes of their keys and strings against template.MaxJSONBytes.
type jsonConverter struct {
	field string // the request field, for error messages
	bytes int
}

// structValue converts a JSON object field.
func structValue(s *structpb.Struct, field string) (*template.OrderedMap, error) {
	c := &jsonConverter{field: field}
	return c.object(s, 0)
}

// argumentsValue converts a tool call's arguments: an object, a string
// holding JSON text (OpenAI's form, decoded with its key order kept, as the
// engines' own OpenAI servers do), any other JSON value, or {} when unset.
func argumentsValue(v *structpb.Value, field string) (any, error) {
	if v == nil {
		return template.NewOrderedMap(), nil
	}
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return jsonText(s.StringValue, field)
	}
	c := &jsonConverter{field: field}
	return c.value(v, 0)
}

// jsonText decodes a JSON text field for a template; field names it in errors.
func jsonText(s, field string) (any, error) {
	v, err := template.DecodeJSON([]byte(s))
	if err != nil {
		return nil, fault.Invalidf(field, "%s is a string that is not valid JSON: %v", field, err)
	}
	return v, nil
}

// object converts s, found at nesting depth depth (0 for the field itself).
func (c *jsonConverter) object(s *structpb.Struct, depth int) (*template.OrderedMap, error) {
	if depth >= template.MaxJSONDepth {
		return nil, c.tooDeep()
	}
	m := template.NewOrderedMap()
	if s == nil {
		return m, nil
	}
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		if err := c.count(len(k)); err != nil {
			return nil, err
		}
		v, err := c.value(s.GetFields()[k], depth+1)
		if err != nil {
			return nil, err
		}
		m.Set(k, v)
	}
	return m, nil
}

// value converts v. Numbers without a fractional part that a float64 holds
// exactly become int64, so that {"n": 2} renders as 2, as Python's json
// module reads it, not 2.0; JSON has no NaN or infinity, so neither is taken.
func (c *jsonConverter) value(v *structpb.Value, depth int) (any, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_BoolValue:
		return k.BoolValue, nil
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fault.Invalidf(c.field, "%s holds the number %v; JSON numbers must be finite", c.field, f)
		}
		if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return int64(f), nil
		}
		return f, nil
	case *structpb.Value_StringValue:
		if err := c.count(len(k.StringValue)); err != nil {
			return nil, err
		}
		return k.StringValue, nil
	case *structpb.Value_StructValue:
		return c.object(k.StructValue, depth)
	case *structpb.Value_ListValue:
		if depth >= template.MaxJSONDepth {
			return nil, c.tooDeep()
		}
		list := make([]any, 0, len(k.ListValue.GetValues()))
		for _, e := range k.ListValue.GetValues() {
			x, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, x)
		}
		return list, nil
	default:
		return nil, fault.Invalidf(c.field, "%s holds a google.protobuf.Value with no kind set; set one (null_value for null)", c.field)
	}
}

func (c *jsonConverter) tooDeep() error {
	return fault.Invalidf(c.field, "%s nests arrays and objects deeper than %d levels; the limit is %d",
		c.field, template.MaxJSONDepth, template.MaxJSONDepth)
}

// count adds n bytes of keys or strings; the total is held to
// template.MaxJSONBytes, as JSON text is.
func (c *jsonConverter) count(n int) error {
	c.bytes += n
	if c.bytes > template.MaxJSONBytes {
		return fault.Invalidf(c.field, "%s holds more than %d bytes of keys and strings; the limit is %d",
			c.field, template.MaxJSONBytes, template.MaxJSONBytes)
	}
	return nil
}
