package constraint

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckJSONSchema reports whether s is a JSON schema the engines can compile:
// one JSON value with nothing after it, an object or a boolean schema, whose
// keywords have the types JSON Schema gives them.
//
// Checked (draft 2020-12 and draft-07 keywords that xgrammar supports):
//   - type: a known name (null boolean object array number integer string) or an array of them;
//   - properties, patternProperties, $defs, definitions, dependentSchemas: objects of schemas
//     (patternProperties keys must be valid regular expressions);
//   - items: a schema, or an array of schemas (draft-07 tuple form); prefixItems: an array of
//     schemas; additionalItems, additionalProperties, unevaluatedItems, unevaluatedProperties,
//     contains, propertyNames, not, if, then, else: schemas;
//   - required: an array of strings; enum: an array; const: any value;
//   - anyOf, oneOf, allOf: non-empty arrays of schemas;
//   - minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number, or draft-04's boolean),
//     multipleOf (positive): numbers; minLength, maxLength, minItems, maxItems, minProperties,
//     maxProperties: non-negative integers; each min no greater than its max;
//   - pattern: a regular expression CheckRegex accepts (so the lookahead Pydantic 2.12 writes
//     into a Decimal field's pattern is refused here, as xgrammar refuses it); format: a string;
//   - $ref: a local reference ("#", "#/$defs/x", "#/definitions/x", any JSON pointer with ~0 ~1
//     escapes and URI percent-escapes) that resolves to a schema in the document.
//
// Unknown keywords are allowed and ignored, as the engines ignore them. A $ref
// cycle is legal (a recursive tree type is one): resolution only looks the
// target up, it never follows references, so a cycle cannot loop.
//
// Errors name the JSON pointer of the offending place:
//
//	at /properties/city/type: "strin" is not a JSON Schema type
//
// Known gaps vs the engines: remote, $id-relative and $anchor references
// are refused, because nothing here fetches documents and a reference that
// does not resolve within the schema is what makes a compile fail; an engine
// set up to resolve them would accept what this refuses. A schema this
// accepts may still use a keyword one backend does not enforce (xgrammar,
// outlines and llguidance each support a different subset), which that engine
// then ignores or refuses at compile time.
func CheckJSONSchema(s string, lim Limits) error {
	lim = lim.withDefaults()
	if err := lim.checkSize("the JSON schema", s); err != nil {
		return err
	}
	root, err := parseJSON(s, lim)
	if err != nil {
		return err
	}
	return checkSchemaValue(root, "", lim)
}

// checkSchemaValue checks an already parsed schema document. base is the
// pointer of the schema inside an enclosing document (a structural tag), so
// that errors point into the document the caller sent; references resolve
// against the schema itself, as the engines resolve them.
func checkSchemaValue(root *jval, base string, lim Limits) error {
	_, err := walkSchema(root, base, lim)
	return err
}

// walkSchema checks a parsed schema and returns the $ref values it found in
// schema positions (not inside enum, const or unknown keywords), which is
// what the tool schemas rewrite.
func walkSchema(root *jval, base string, lim Limits) ([]*jval, error) {
	c := &schemaChecker{root: root, base: base, lim: lim, walked: map[*jval]bool{}}
	if err := c.schema(root, ""); err != nil {
		return nil, err
	}
	// Resolve every $ref. A target that sits where no keyword made it a
	// schema (an OpenAPI-style "#/components/schemas/x") is checked here, at
	// most once, and may add references of its own.
	for i := 0; i < len(c.refs); i++ {
		r := c.refs[i]
		target, tptr, err := c.resolve(r.val.str)
		if err != nil {
			return nil, fmt.Errorf("at %s: $ref %s %w", showPointer(c.base+r.at+"/$ref"), quoteShort(r.val.str), err)
		}
		if err := c.schema(target, tptr); err != nil {
			return nil, err
		}
	}
	vals := make([]*jval, len(c.refs))
	for i, r := range c.refs {
		vals[i] = r.val
	}
	return vals, nil
}

// schemaRef is a $ref met in a schema position: the pointer of the schema
// holding it and its string value.
type schemaRef struct {
	at  string
	val *jval
}

type schemaChecker struct {
	root   *jval
	base   string
	lim    Limits
	walked map[*jval]bool // values already checked as schemas
	refs   []schemaRef
	// index holds the member maps of large objects that references went
	// through, so resolving many references into a big $defs stays linear.
	index map[*jval]map[string]*jval
}

// member looks key up in object v, through an index for large objects.
func (c *schemaChecker) member(v *jval, key string) *jval {
	if len(v.obj) < 16 {
		return v.get(key)
	}
	m, ok := c.index[v]
	if !ok {
		if c.index == nil {
			c.index = map[*jval]map[string]*jval{}
		}
		m = make(map[string]*jval, len(v.obj))
		for _, mem := range v.obj {
			m[mem.key] = mem.val // the last of a repeated key wins, as in get
		}
		c.index[v] = m
	}
	return m[key]
}

// showPointer prints a JSON pointer for a message; the empty pointer is the
// whole document.
func showPointer(p string) string {
	if p == "" {
		return "the root"
	}
	if len(p) > 200 { // keep a message short whatever the key lengths
		head, tail := 80, len(p)-80
		for head > 0 && !utf8.RuneStart(p[head]) {
			head--
		}
		for tail < len(p) && !utf8.RuneStart(p[tail]) {
			tail++
		}
		return p[:head] + "..." + p[tail:]
	}
	return p
}

// escapeToken escapes one JSON pointer reference token (RFC 6901).
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") // ~ first, as RFC 6901 says
}

func isJSONSchemaType(name string) bool {
	switch name {
	case "null", "boolean", "object", "array", "number", "integer", "string":
		return true
	}
	return false
}

func (c *schemaChecker) errorf(ptr, format string, args ...any) error {
	return fmt.Errorf("at %s: %s", showPointer(c.base+ptr), fmt.Sprintf(format, args...))
}

// schema checks v as a schema at pointer ptr. Its recursion follows the
// document's nesting, which the parser bounded by Limits.MaxDepth.
func (c *schemaChecker) schema(v *jval, ptr string) error {
	if c.walked[v] {
		return nil
	}
	c.walked[v] = true
	switch v.kind {
	case jBool:
		return nil
	case jObject:
	default:
		return c.errorf(ptr, "a schema must be an object or a boolean, not %s", v.kind)
	}
	for _, m := range effective(v.obj) {
		if err := c.keyword(v, m.key, m.val, ptr+"/"+escapeToken(m.key)); err != nil {
			return err
		}
	}
	for _, pair := range [][2]string{
		{"minimum", "maximum"}, {"minLength", "maxLength"},
		{"minItems", "maxItems"}, {"minProperties", "maxProperties"},
	} {
		lo, hi := v.get(pair[0]), v.get(pair[1])
		if lo != nil && hi != nil && lo.kind == jNumber && hi.kind == jNumber && lo.num() > hi.num() {
			return c.errorf(ptr, "%s %s is greater than %s %s", pair[0], lo.describe(), pair[1], hi.describe())
		}
	}
	return nil
}

func (c *schemaChecker) keyword(parent *jval, key string, v *jval, ptr string) error {
	switch key {
	case "type":
		return c.typeKeyword(v, ptr)
	case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
		if v.kind != jObject {
			return c.errorf(ptr, "%s must be an object of schemas, not %s", key, v.kind)
		}
		for _, m := range effective(v.obj) {
			if key == "patternProperties" {
				if err := checkRegex(m.key, c.lim); err != nil {
					return c.errorf(ptr, "property pattern %s: %v", quoteShort(m.key), err)
				}
			}
			if err := c.schema(m.val, ptr+"/"+escapeToken(m.key)); err != nil {
				return err
			}
		}
	case "items":
		if v.kind == jArray { // draft-07 tuple form
			return c.schemaArray(key, v, ptr, false)
		}
		return c.schema(v, ptr)
	case "prefixItems":
		return c.schemaArray(key, v, ptr, false)
	case "anyOf", "oneOf", "allOf":
		return c.schemaArray(key, v, ptr, true)
	case "additionalItems", "additionalProperties", "unevaluatedItems", "unevaluatedProperties",
		"contains", "propertyNames", "not", "if", "then", "else":
		return c.schema(v, ptr)
	case "dependencies": // draft-07: a schema or an array of property names per property
		if v.kind != jObject {
			return c.errorf(ptr, "dependencies must be an object, not %s", v.kind)
		}
		for _, m := range effective(v.obj) {
			if m.val.kind == jArray {
				if err := c.stringArray(m.val, ptr+"/"+escapeToken(m.key)); err != nil {
					return err
				}
				continue
			}
			if err := c.schema(m.val, ptr+"/"+escapeToken(m.key)); err != nil {
				return err
			}
		}
	case "required":
		return c.stringArray(v, ptr)
	case "enum":
		if v.kind != jArray {
			return c.errorf(ptr, "enum must be an array, not %s", v.kind)
		}
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		if v.kind != jNumber && !(v.kind == jBool && strings.HasPrefix(key, "exclusive")) {
			return c.errorf(ptr, "%s must be a number, not %s", key, v.describe())
		}
	case "multipleOf":
		if v.kind != jNumber || v.num() <= 0 {
			return c.errorf(ptr, "multipleOf must be a number greater than 0, not %s", v.describe())
		}
	case "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties":
		if !isNonNegativeInteger(v) {
			return c.errorf(ptr, "%s must be a non-negative integer, not %s", key, v.describe())
		}
	case "pattern":
		if v.kind != jString {
			return c.errorf(ptr, "pattern must be a string, not %s", v.kind)
		}
		if err := checkRegex(v.str, c.lim); err != nil {
			return c.errorf(ptr, "%v", err)
		}
	case "format":
		if v.kind != jString {
			return c.errorf(ptr, "format must be a string, not %s", v.kind)
		}
	case "$ref":
		if v.kind != jString {
			return c.errorf(ptr, "$ref must be a string, not %s", v.kind)
		}
		c.refs = append(c.refs, schemaRef{at: strings.TrimSuffix(ptr, "/$ref"), val: v})
	}
	return nil
}

func (c *schemaChecker) typeKeyword(v *jval, ptr string) error {
	switch v.kind {
	case jString:
		if !isJSONSchemaType(v.str) {
			return c.errorf(ptr, "%s is not a JSON Schema type (want one of null, boolean, object, array, number, integer, string)", v.describe())
		}
	case jArray:
		for i, el := range v.arr {
			if el.kind != jString || !isJSONSchemaType(el.str) {
				return c.errorf(ptr+"/"+strconv.Itoa(i), "%s is not a JSON Schema type", el.describe())
			}
		}
	default:
		return c.errorf(ptr, "type must be a type name or an array of them, not %s", v.kind)
	}
	return nil
}

func (c *schemaChecker) schemaArray(key string, v *jval, ptr string, nonEmpty bool) error {
	if v.kind != jArray {
		return c.errorf(ptr, "%s must be an array of schemas, not %s", key, v.kind)
	}
	if nonEmpty && len(v.arr) == 0 {
		return c.errorf(ptr, "%s must not be empty", key)
	}
	for i, el := range v.arr {
		if err := c.schema(el, ptr+"/"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

func (c *schemaChecker) stringArray(v *jval, ptr string) error {
	if v.kind != jArray {
		return c.errorf(ptr, "want an array of strings, not %s", v.kind)
	}
	for i, el := range v.arr {
		if el.kind != jString {
			return c.errorf(ptr+"/"+strconv.Itoa(i), "want a string, not %s", el.describe())
		}
	}
	return nil
}

// effective returns the members that count when keys repeat: the last of
// each key, as Python's json module (which the engines parse with) keeps it.
// It is linear: a map is built only when some key does repeat.
func effective(members []jmember) []jmember {
	if len(members) < 2 {
		return members
	}
	last := make(map[string]int, len(members))
	for i, m := range members {
		last[m.key] = i
	}
	if len(last) == len(members) {
		return members
	}
	out := make([]jmember, 0, len(last))
	for i, m := range members {
		if last[m.key] == i {
			out = append(out, m)
		}
	}
	return out
}

func isNonNegativeInteger(v *jval) bool {
	if v.kind != jNumber || strings.HasPrefix(v.str, "-") {
		return false
	}
	f := v.num()
	return f == float64(int64(f))
}

var (
	errRefNotLocal   = errors.New("is not a local reference: only references within the schema (starting with #) can be resolved")
	errRefNotPointer = errors.New("is not a JSON pointer (after # it must be empty or start with /)")
)

// resolve looks a local reference up in the document and returns the
// target and its pointer. It never follows a $ref it finds, so a cycle of
// references cannot make it loop.
func (c *schemaChecker) resolve(ref string) (*jval, string, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, "", errRefNotLocal
	}
	if strings.IndexByte(frag, '%') >= 0 {
		if unescaped, err := url.PathUnescape(frag); err == nil {
			frag = unescaped
		}
	}
	if frag != "" && frag[0] != '/' {
		return nil, "", errRefNotPointer
	}
	v, ptr := c.root, ""
	if frag == "" {
		return v, ptr, nil
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		if strings.IndexByte(tok, '~') >= 0 {
			// ~1 first, then ~0, as RFC 6901 orders it, so "~01" is "~1".
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		parent := ptr
		ptr += "/" + escapeToken(tok)
		switch v.kind {
		case jObject:
			next := c.member(v, tok)
			if next == nil {
				return nil, "", fmt.Errorf("does not resolve: %s has no member %s", showPointer(parent), quoteShort(tok))
			}
			v = next
		case jArray:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v.arr) || (len(tok) > 1 && tok[0] == '0') {
				return nil, "", fmt.Errorf("does not resolve: %s is not an index of the array at %s", quoteShort(tok), showPointer(parent))
			}
			v = v.arr[i]
		default:
			return nil, "", fmt.Errorf("does not resolve: %s is %s", showPointer(parent), v.kind)
		}
	}
	if v.kind != jObject && v.kind != jBool {
		return nil, "", fmt.Errorf("resolves to %s, not a schema", v.kind)
	}
	return v, ptr, nil
}
