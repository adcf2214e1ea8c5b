// Package constraint checks structured-output constraints (JSON schema, regular
// expression, EBNF grammar, structural tag) before the router dispatches them,
// and builds the JSON schemas that enforce a chat request's tool_choice.
//
// Why the router checks at all: the engines (SGLang, vLLM) compile a constraint
// with xgrammar, outlines or llguidance only after the request has been
// scheduled, so a typo in a schema costs a worker slot, and the engine's error
// comes back as an opaque failure of the stream. A check here turns it into an
// INVALID_ARGUMENT that names the place (a JSON pointer, a line:column) before
// any worker is involved.
//
// What the checks promise, in order of importance:
//
//  1. They never hang and never blow up: every input is bounded in bytes,
//     nesting depth and node count (see Limits) before any work that grows
//     with those, parsing is linear, and nothing recurses deeper than
//     Limits.MaxDepth.
//  2. They never reject what the engines accept for common use. Where the
//     engines' dialects differ (xgrammar is the default backend of both
//     engines), the checks lean to accepting: unknown JSON Schema keywords
//     are ignored, as the engines ignore them.
//  3. They reject what cannot compile anywhere, with a message a person can
//     act on. They are not the engines' compilers: a constraint that passes
//     may still be refused by a particular backend (each check's doc comment
//     lists the known gaps).
//
// The package is pure Go with the standard library only, holds no
// package-level mutable state, and imports nothing from kvgate, so the server
// and the adapters can both use it.
package constraint
