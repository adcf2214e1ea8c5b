package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkOpenAIStream measures a streamed /v1/completions of 64 tokens
// through the HTTP front, client, router and simulated engines in this
// process, with the per-write bound of --stream-send-timeout off and at its
// default: each server-sent event then sets a write deadline and clears it.
//
//	go test -run XXX -bench OpenAIStream -count 6 ./cmd/kvgate/
func BenchmarkOpenAIStream(b *testing.B) {
	for _, bc := range []struct{ name, bound string }{{"bound=off", "0"}, {"bound=60s", "60s"}} {
		b.Run(bc.name, func(b *testing.B) {
			hr := startHTTPRouter(b, "--stream-send-timeout", bc.bound, "--log-level", "warn")
			body := `{"prompt": "hi", "stream": true, "ignore_eos": true, "max_tokens": 64}`
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				resp, err := hr.client.Post(hr.url+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				out, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(out), "[DONE]") {
					b.Fatalf("status %d, %v: %.200s", resp.StatusCode, err, out)
				}
			}
		})
	}
}
