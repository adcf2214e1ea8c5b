package openai

import (
	"encoding/json"
	"io"
)

// sseWriter writes server-sent events: `data: JSON\n\n`, and the closing
// `data: [DONE]\n\n` of OpenAI's streams. The first write error is kept
// and later writes are skipped.
type sseWriter struct {
	w   io.Writer
	err error
}

func (s *sseWriter) data(v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	s.write([]byte("data: "))
	s.write(b)
	s.write([]byte("\n\n"))
}

func (s *sseWriter) done() { s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) write(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}
