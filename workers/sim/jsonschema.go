package sim

// A minimal-instance generator for JSON schemas: the simulator's answer to a
// request constrained by json_schema is the smallest document it can build
// that the schema accepts, so that tests see structured output reach clients
// as a real engine would produce it (valid, if dull).
//
// What it understands: type (one or a list: the first that can be
// instantiated is used), const, enum (the first value), object (every
// required property, from properties or additionalProperties), array
// (minItems items, from prefixItems then items), string (minLength 'a's, or
// a fixed instance of the formats date-time, date, time, email, uuid, uri),
// number and integer (minimum or exclusiveMinimum, rounded up to multipleOf,
// checked against maximum), boolean, null, anyOf and oneOf (the first
// branch, with the schema's other keywords), allOf (its branches merged:
// properties and required united, other keywords from the first that has
// them), and $ref to #/$defs/NAME or #/definitions/NAME (and "#"). A schema
// with no type is instantiated as an object. What it cannot promise valid,
// it refuses: a string pattern (without const or enum), maxLength below
// minLength, an empty range, a false schema, an unknown reference, or a
// schema that nests deeper than schemaMaxDepth or would produce more than
// schemaMaxNodes values. Keywords it does not know are ignored, so a schema
// whose other keywords forbid the minimal instance gets an invalid answer;
// that is the limit of a simulator, not an engine's behaviour.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

const (
	// schemaMaxDepth bounds nesting, through references included: a
	// recursive schema whose recursion is required has no finite instance.
	schemaMaxDepth = 32
	// schemaMaxNodes bounds the values in an instance (minItems multiplies).
	schemaMaxNodes = 10000
	// schemaMaxString bounds a string's minLength.
	schemaMaxString = 4096
)

// errSchema marks a schema the generator cannot instantiate.
var errSchema = errors.New("cannot instantiate the JSON schema")

// schemaInstance returns a minimal JSON document valid against schema (JSON
// text), or an error wrapping errSchema that says why it cannot.
func schemaInstance(schema []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	var root any
	if err := d.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", errSchema, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: trailing data after the schema", errSchema)
	}
	g := &schemaGen{root: root}
	v, err := g.instance(root, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

type schemaGen struct {
	root  any
	nodes int
	// flat memoizes flatten by the schema object's identity: a schema
	// reached many times (a referenced definition, array items) is merged
	// once.
	flat map[uintptr]flatSchema
}

type flatSchema struct {
	s   map[string]any
	err error
}

func schemaErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errSchema}, args...)...)
}

// instance builds s's minimal instance at nesting depth.
func (g *schemaGen) instance(s any, depth int) (any, error) {
	if depth > schemaMaxDepth {
		return nil, schemaErr("nested deeper than %d levels (a required recursion?)", schemaMaxDepth)
	}
	g.nodes++
	if g.nodes > schemaMaxNodes {
		return nil, schemaErr("the instance would have more than %d values", schemaMaxNodes)
	}
	switch x := s.(type) {
	case bool:
		if !x {
			return nil, schemaErr("the schema false accepts nothing")
		}
		return map[string]any{}, nil
	case map[string]any:
		return g.object(x, depth)
	}
	return nil, schemaErr("a schema must be an object or a boolean, got %T", s)
}

func (g *schemaGen) object(s map[string]any, depth int) (any, error) {
	key := reflect.ValueOf(s).Pointer()
	f, ok := g.flat[key]
	if !ok {
		f.s, f.err = g.flatten(s)
		if g.flat == nil {
			g.flat = map[uintptr]flatSchema{}
		}
		g.flat[key] = f
	}
	if f.err != nil {
		return nil, f.err
	}
	s = f.s
	if c, ok := s["const"]; ok {
		return c, nil
	}
	if e, ok := s["enum"]; ok {
		list, isList := e.([]any)
		if !isList || len(list) == 0 {
			return nil, schemaErr("enum must be a non-empty array")
		}
		return list[0], nil
	}
	var types []string
	switch t := s["type"].(type) {
	case nil:
		types = []string{"object"}
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if name, ok := x.(string); ok {
				types = append(types, name)
			}
		}
	}
	if len(types) == 0 {
		return nil, schemaErr("type must be a string or a list of strings")
	}
	var first error
	for _, t := range types {
		v, err := g.typed(t, s, depth)
		if err == nil {
			return v, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// flatten resolves $ref, allOf, anyOf and oneOf into one schema object.
func (g *schemaGen) flatten(s map[string]any) (map[string]any, error) {
	for range schemaMaxDepth {
		ref, hasRef := s["$ref"]
		all, hasAll := s["allOf"]
		anyOf, hasAny := s["anyOf"]
		oneOf, hasOne := s["oneOf"]
		if !hasRef && !hasAll && !hasAny && !hasOne {
			return s, nil
		}
		rest := make(map[string]any, len(s))
		for k, v := range s {
			switch k {
			case "$ref", "allOf", "anyOf", "oneOf":
			default:
				rest[k] = v
			}
		}
		parts := []any{rest}
		if hasRef {
			name, ok := ref.(string)
			if !ok {
				return nil, schemaErr("$ref must be a string")
			}
			target, err := g.resolve(name)
			if err != nil {
				return nil, err
			}
			parts = append(parts, target)
		}
		if hasAll {
			list, ok := all.([]any)
			if !ok || len(list) == 0 {
				return nil, schemaErr("allOf must be a non-empty array")
			}
			parts = append(parts, list...)
		}
		for _, branches := range []struct {
			v    any
			has  bool
			name string
		}{{anyOf, hasAny, "anyOf"}, {oneOf, hasOne, "oneOf"}} {
			if !branches.has {
				continue
			}
			list, ok := branches.v.([]any)
			if !ok || len(list) == 0 {
				return nil, schemaErr("%s must be a non-empty array", branches.name)
			}
			parts = append(parts, list[0])
		}
		merged := map[string]any{}
		for _, p := range parts {
			if err := mergeSchema(merged, p); err != nil {
				return nil, err
			}
		}
		s = merged
	}
	return nil, schemaErr("references nest deeper than %d levels", schemaMaxDepth)
}

// mergeSchema adds p's keywords to m: properties and required are united,
// other keywords keep their first value.
func mergeSchema(m map[string]any, p any) error {
	switch x := p.(type) {
	case bool:
		if !x {
			return schemaErr("the schema false accepts nothing")
		}
		return nil
	case map[string]any:
		for k, v := range x {
			switch k {
			case "properties":
				props, _ := m[k].(map[string]any)
				if props == nil {
					props = map[string]any{}
				}
				add, _ := v.(map[string]any)
				for name, ps := range add {
					if _, ok := props[name]; !ok {
						props[name] = ps
					}
				}
				m[k] = props
			case "required":
				req, _ := m[k].([]any)
				add, _ := v.([]any)
				m[k] = append(append([]any(nil), req...), add...)
			default:
				if _, ok := m[k]; !ok {
					m[k] = v
				}
			}
		}
		return nil
	}
	return schemaErr("a schema must be an object or a boolean, got %T", p)
}

// resolve follows a local reference: "#", "#/$defs/NAME",
// "#/definitions/NAME" (JSON pointer escapes ~0 and ~1 undone).
func (g *schemaGen) resolve(ref string) (any, error) {
	if ref == "#" {
		return g.root, nil
	}
	var section string
	switch {
	case strings.HasPrefix(ref, "#/$defs/"):
		section = "$defs"
	case strings.HasPrefix(ref, "#/definitions/"):
		section = "definitions"
	default:
		return nil, schemaErr("unsupported $ref %q (only #/$defs/... and #/definitions/...)", ref)
	}
	name := strings.TrimPrefix(ref, "#/"+section+"/")
	name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
	root, _ := g.root.(map[string]any)
	defs, _ := root[section].(map[string]any)
	target, ok := defs[name]
	if !ok {
		return nil, schemaErr("$ref %q names no definition", ref)
	}
	return target, nil
}

func (g *schemaGen) typed(t string, s map[string]any, depth int) (any, error) {
	switch t {
	case "object":
		return g.objectValue(s, depth)
	case "array":
		return g.array(s, depth)
	case "string":
		return stringValue(s)
	case "number", "integer":
		return numberValue(s, t == "integer")
	case "boolean":
		return false, nil
	case "null":
		return nil, nil
	}
	return nil, schemaErr("unknown type %q", t)
}

func (g *schemaGen) objectValue(s map[string]any, depth int) (any, error) {
	out := map[string]any{}
	props, _ := s["properties"].(map[string]any)
	req, _ := s["required"].([]any)
	for _, r := range req {
		name, ok := r.(string)
		if !ok {
			return nil, schemaErr("required must list strings")
		}
		if _, done := out[name]; done {
			continue
		}
		ps, ok := props[name]
		if !ok {
			ps, ok = s["additionalProperties"]
		}
		if !ok {
			ps = true
		}
		v, err := g.instance(ps, depth+1)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	n, err := count(s, "minProperties", 0)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(props) {
		if len(out) >= n {
			break
		}
		if _, done := out[name]; done {
			continue
		}
		v, err := g.instance(props[name], depth+1)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	if len(out) < n {
		return nil, schemaErr("minProperties %d needs more properties than the schema names", n)
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (g *schemaGen) array(s map[string]any, depth int) (any, error) {
	n, err := count(s, "minItems", 0)
	if err != nil {
		return nil, err
	}
	if n > schemaMaxNodes {
		return nil, schemaErr("minItems %d is beyond the simulator's %d", n, schemaMaxNodes)
	}
	if m, err := count(s, "maxItems", -1); err != nil {
		return nil, err
	} else if m >= 0 && m < n {
		return nil, schemaErr("maxItems %d is below minItems %d", m, n)
	}
	prefix, _ := s["prefixItems"].([]any)
	items, hasItems := s["items"]
	if !hasItems {
		items = true
	}
	out := make([]any, 0, min(n, 64))
	for i := range min(n, len(prefix)) {
		v, err := g.instance(prefix[i], depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == n {
		return out, nil
	}
	// The items after prefixItems are all the same minimal instance: build
	// it once, and count its values once per copy against the budget.
	before := g.nodes
	v, err := g.instance(items, depth+1)
	if err != nil {
		return nil, err
	}
	copies := n - len(out)
	if g.nodes += (g.nodes - before) * (copies - 1); g.nodes > schemaMaxNodes {
		return nil, schemaErr("the instance would have more than %d values", schemaMaxNodes)
	}
	for range copies {
		out = append(out, v)
	}
	return out, nil
}

// count reads a non-negative integer keyword, def when absent.
func count(s map[string]any, key string, def int) (int, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	f, ok := number(v)
	if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, schemaErr("%s must be a non-negative integer", key)
	}
	return int(f), nil
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// formatInstance is a fixed string valid in format f, for the formats
// engines enforce; false for the others.
func formatInstance(f string) (string, bool) {
	switch f {
	case "date-time":
		return "2000-01-01T00:00:00Z", true
	case "date":
		return "2000-01-01", true
	case "time":
		return "00:00:00Z", true
	case "email":
		return "a@example.com", true
	case "uuid":
		return "00000000-0000-0000-0000-000000000000", true
	case "uri":
		return "https://example.com", true
	}
	return "", false
}

func stringValue(s map[string]any) (any, error) {
	if _, ok := s["pattern"]; ok {
		return nil, schemaErr("string patterns are not supported (use const or enum)")
	}
	minLen, err := count(s, "minLength", 0)
	if err != nil {
		return nil, err
	}
	maxLen, err := count(s, "maxLength", -1)
	if err != nil {
		return nil, err
	}
	if f, ok := s["format"].(string); ok {
		if v, known := formatInstance(f); known {
			if n := len([]rune(v)); n < minLen || (maxLen >= 0 && n > maxLen) {
				return nil, schemaErr("format %q does not fit the length bounds", f)
			}
			return v, nil
		}
	}
	if maxLen >= 0 && maxLen < minLen {
		return nil, schemaErr("maxLength %d is below minLength %d", maxLen, minLen)
	}
	if minLen > schemaMaxString {
		return nil, schemaErr("minLength %d is beyond the simulator's %d", minLen, schemaMaxString)
	}
	return strings.Repeat("a", minLen), nil
}

func numberValue(s map[string]any, integer bool) (any, error) {
	lo, hasLo := math.Inf(-1), false
	loExcl := false
	if v, ok := s["minimum"]; ok {
		f, isNum := number(v)
		if !isNum {
			return nil, schemaErr("minimum must be a number")
		}
		lo, hasLo = f, true
	}
	if v, ok := s["exclusiveMinimum"]; ok {
		if f, isNum := number(v); isNum && (!hasLo || f >= lo) {
			lo, hasLo, loExcl = f, true, true
		}
	}
	hi, hiExcl := math.Inf(1), false
	if v, ok := s["maximum"]; ok {
		f, isNum := number(v)
		if !isNum {
			return nil, schemaErr("maximum must be a number")
		}
		hi = f
	}
	if v, ok := s["exclusiveMaximum"]; ok {
		if f, isNum := number(v); isNum && f <= hi {
			hi, hiExcl = f, true
		}
	}
	x := 0.0
	switch {
	case hasLo && loExcl:
		x = lo + 1
		if integer {
			x = math.Floor(lo) + 1
		}
	case hasLo:
		x = lo
	case hi < 0 || (hi == 0 && hiExcl):
		x = hi - 1
	}
	if integer {
		x = math.Ceil(x)
	}
	if m, ok := s["multipleOf"]; ok {
		k, isNum := number(m)
		if !isNum || k <= 0 {
			return nil, schemaErr("multipleOf must be a positive number")
		}
		x = math.Ceil(x/k) * k
		if loExcl && x <= lo {
			x += k
		}
		if integer && x != math.Trunc(x) {
			return nil, schemaErr("multipleOf %v gives no integer the simulator finds", k)
		}
	}
	if math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) > 1<<53 {
		return nil, schemaErr("no number the simulator can write fits the bounds")
	}
	if x > hi || (hiExcl && x >= hi) || (hasLo && (x < lo || (loExcl && x <= lo))) {
		return nil, schemaErr("no value fits between the minimum and the maximum")
	}
	return json.Number(strconv.FormatFloat(x, 'f', -1, 64)), nil
}
