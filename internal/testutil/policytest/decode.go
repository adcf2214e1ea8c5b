package policytest

import (
	"time"

	"github.com/kvgate/kvgate/workers"
)

// Decode teaches w one request's decode, as the request path does: tokens
// after its first at perToken each, with batch requests in flight on w
// (this one included) throughout. It sleeps for the decode, so callers
// run it in a testing/synctest bubble.
func Decode(w *workers.Worker, batch, tokens int, perToken time.Duration) {
	var releases []func()
	for range batch {
		releases = append(releases, w.Acquire())
	}
	d := w.Decoding()
	time.Sleep(time.Duration(tokens) * perToken)
	d.Done(tokens)
	for _, r := range releases {
		r()
	}
}
