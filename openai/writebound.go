package openai

import (
	"net/http"
	"time"
)

// boundWriter bounds each write of a response to its client. A client that
// stops reading a streamed answer fills its socket's buffers and then
// blocks the handler's write; the handler stops reading the router's
// stream, the router's send stalls, and the engine holds the request. With
// a deadline on each write, the write fails, the handler returns, and its
// call's context ends the router's call and the engine's request. The
// bound is on each batch of writes (one event of a stream, one whole
// answer), not on the answer's stream, so a client that keeps reading is cut
// only if one batch takes it longer than the bound to read.
//
// The deadline is set before a write finds none set, and cleared once a
// flush has put everything written on the wire: it bounds a batch of
// writes (one event of a stream, one whole answer), and never the wait
// for the next. (An HTTP/2 stream whose write deadline passes is reset
// even when no write is under way.) net/http keeps a connection's write
// deadline from one request to the next (it sets one itself only when the
// server has a WriteTimeout, which would bound a whole answer), so the
// deadline is also cleared when a request starts, and set afresh for the
// server's own writes after the handler returns.
type boundWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	armed bool // a deadline is set
}

// newBoundWriter wraps w with a deadline of d on each batch of writes; nil
// when d is 0 or w's connection takes no deadlines.
func newBoundWriter(w http.ResponseWriter, d time.Duration) *boundWriter {
	if d <= 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	if rc.SetWriteDeadline(time.Time{}) != nil {
		return nil
	}
	return &boundWriter{ResponseWriter: w, rc: rc, d: d}
}

// arm sets the deadline d from now unless one is set.
func (b *boundWriter) arm() {
	if !b.armed {
		b.armed = true
		_ = b.rc.SetWriteDeadline(time.Now().Add(b.d))
	}
}

// last sets the deadline for the server's writes after the handler.
func (b *boundWriter) last() {
	b.armed = false
	b.arm()
}

func (b *boundWriter) WriteHeader(code int) {
	b.arm()
	b.ResponseWriter.WriteHeader(code)
}

func (b *boundWriter) Write(p []byte) (int, error) {
	b.arm()
	return b.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController's Flush calls. A flush that
// fails keeps the deadline: the response is over.
func (b *boundWriter) FlushError() error {
	b.arm()
	if err := b.rc.Flush(); err != nil {
		return err
	}
	b.armed = false
	return b.rc.SetWriteDeadline(time.Time{})
}

// Unwrap lets http.ResponseController reach the server's writer.
func (b *boundWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }
