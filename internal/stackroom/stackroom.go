// Package stackroom grows a goroutine's stack ahead of a deep call path.
//
// A goroutine starts with a small stack and the runtime doubles it when a
// call needs more, copying it each time and adjusting every frame on it; the
// garbage collector halves the stack of an idle goroutine again. Grown deep
// in the request path (interceptors, the pipeline, the policy, a gRPC client
// stream) each doubling copies some thirty frames, which cost the router 8%
// of its CPU per 1K-token request in a profile. Growing the stack first, with
// one frame on it, costs a copy of that one frame instead.
//
// The reserves are a frame of the size wanted and nothing else. Written in
// Go, the frame is an array the compiler zeroes on every call (12 and 24
// KiB, about 2% of the router's CPU at fresh 1K-token prompts, BENCHMARKS.md
// "A stack reserve that writes nothing"); on amd64 and arm64 they are
// written in assembly, whose frames the runtime checks against the stack
// (growing it) but nothing writes.
package stackroom
