package main

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// With --tls-cert-file and --tls-client-ca-file, HTTP is served over
// mutual TLS with the router's own files, to HTTP/1.1 and HTTP/2 clients
// alike; the in-memory hop to the gRPC server needs no certificate of its
// own. With Admin on a port of its own, /v1/models still answers.
func TestOpenAIOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clientCA := testutil.NewCA(t, "server-ca"), testutil.NewCA(t, "client-ca")
	srvCert, srvKey := ca.Issue(t, 2, true)
	hr := startHTTPRouter(t,
		"--tls-cert-file", testutil.WriteFile(t, dir, "cert.pem", srvCert),
		"--tls-key-file", testutil.WriteFile(t, dir, "key.pem", srvKey),
		"--tls-client-ca-file", testutil.WriteFile(t, dir, "client-ca.pem", clientCA.PEM),
		"--api-key", "sk-tls", "--admin-port", "0")
	certPEM, keyPEM := clientCA.Issue(t, 9, false)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		proto  string // "": the request must fail
	}{
		{"HTTP/1.1 with a client certificate", &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}}}, "HTTP/1.1"},
		{"HTTP/2 with a client certificate", &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}}}, "HTTP/2.0"},
		{"without a client certificate", &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, hr.url+"/v1/models", nil)
			req.Header.Set("Authorization", "Bearer sk-tls")
			resp, err := tc.client.Do(req)
			if tc.proto == "" {
				if err == nil {
					resp.Body.Close()
					t.Fatal("a client without a certificate was served")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Proto != tc.proto {
				t.Fatalf("GET /v1/models: %s %d: %v", resp.Proto, resp.StatusCode, decode(t, resp.Body))
			}
			hr.client = tc.client
			chat := hr.post(t, "/v1/chat/completions", `{"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}`, "Authorization", "Bearer sk-tls")
			if chat.StatusCode != http.StatusOK {
				t.Fatalf("chat: %d: %v", chat.StatusCode, decode(t, chat.Body))
			}
		})
	}
}

// The client's traceparent reaches the router as the gRPC metadata it
// reads, so the router's spans join the HTTP client's trace.
func TestOpenAIJoinsTheClientsTrace(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	recv := testutil.StartOTLPReceiver(t)
	hr := startHTTPRouter(t, "--otlp-endpoint", recv.Addr(), "--otlp-sampling-ratio", "1")
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := hr.post(t, "/v1/completions", `{"max_tokens": 2, "prompt": "hi"}`, "traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, decode(t, resp.Body))
	}
	hr.stop() // flushes the spans
	var names []string
	for _, s := range recv.Spans() {
		if s.TraceID() == trace {
			names = append(names, s.Name)
		}
	}
	want := map[string]bool{"kvgate.v1.Router/Generate": true, "kvgate.select": true}
	for _, n := range names {
		delete(want, n)
	}
	if len(want) > 0 {
		t.Fatalf("spans in the client's trace %v; missing %v", names, want)
	}
}
