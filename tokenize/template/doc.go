// Package template renders Hugging Face chat templates exactly as Python
// Jinja2 3.1 does when transformers renders them (apply_chat_template):
// an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension ({% break %}, {% continue %}), the
// {% generation %} block (renders its body), and the globals and filter
// transformers adds: raise_exception(msg), strftime_now(fmt) and a tojson
// that is json.dumps(x, ensure_ascii=False, indent=..., separators=...,
// sort_keys=False) instead of Jinja's HTML-safe one.
//
// # Why our own engine
//
// The prompt a template renders is hashed into token ids and routed on; a
// single byte of difference (a dict printed in another key order, "1" for
// "1.0", a newline kept that Jinja trims) changes the ids, the predicted
// cache hits and the generation. Parity therefore needs control over value
// semantics, not only syntax. github.com/nikolalohinski/gonja/v2 gets about
// 52 of our 64 reference templates right; the rest fail on dict key order in
// |items, dict equality, a parenthesised inline if, {% generation %}, macro
// varargs and some "set ... if ... else" forms, and its values are Go maps
// and reflection, so fixing them means fighting the library. A chat-template
// engine is small (lexer, parser, tree-walking evaluator: a few thousand
// lines), so we wrote one whose every value has its Python meaning:
//
//   - dicts keep insertion order (*OrderedMap; DecodeJSON keeps the order of
//     JSON objects), compare by content, and print as Python's repr;
//   - ints and floats stay distinct (1 and 1.0 print differently), floats
//     print with Python's repr (shortest round trip, 1e+16, 1e-05), / is true
//     division, // and % floor, bool is an int;
//   - str, list and dict methods (strip, split, startswith, items, get, ...)
//     and the Python error messages of their failures;
//   - jinja2.Undefined: prints as "", iterates as empty, is falsy, and fails
//     on attribute access, arithmetic and comparison with Jinja's messages;
//   - select, map, reject and friends return one-shot generators (always
//     truthy, no len()), as in Jinja;
//   - scoping as Jinja compiles it: every loop iteration, macro call and
//     with block gets a fresh scope, so {% set %} inside a loop does not
//     leak (namespace() is the way out), and macros see their defining
//     scope's current values;
//   - whitespace control in the lexer exactly as Jinja's regex lexer does it
//     ("-" and "+" modifiers, trim_blocks, lstrip_blocks, a single trailing
//     newline dropped, \r\n normalised);
//   - unknown filters and tests are compile errors except inside if
//     branches, where Jinja defers them to run time.
//
// Parity is pinned by tests against output produced by Python Jinja2 3.1.6
// (testdata/regen.py): the 64 real templates of testdata/cases.json byte for
// byte; every one of those templates rendered with the variables of every
// case (8,192 renders, testdata/cross.json), which reaches branches and
// error paths the reference inputs leave cold; and testdata/semantics.json,
// some three hundred small templates that each pin one rule (whitespace,
// loop variables, scoping, filters, tests, repr, tojson, error cases).
//
// Known differences:
//   - ints are 64-bit (Python's are unbounded): overflow is an error here,
//     never a wrapped result;
//   - markupsafe.Markup is not modelled: |safe and |escape return plain
//     strings, so "'<' + x|safe" is not HTML-escaped as Python would do and
//     a list of escaped strings prints without Markup(...);
//   - float ** float with a non-integral exponent uses Go's math.Pow, which
//     can differ from the C library in the last digit; complex results are
//     errors;
//   - template loading ({% extends %}, {% include %}, {% import %},
//     {% block %}) is absent: a chat template is a single string.
//
// A Template is immutable after Compile and may be rendered concurrently.
package template
