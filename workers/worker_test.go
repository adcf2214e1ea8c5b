package workers_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in      string
		url     string
		target  string
		wantErr bool
	}{
		{in: "grpc://10.0.0.1:30001", url: "grpc://10.0.0.1:30001", target: "10.0.0.1:30001"},
		{in: "10.0.0.1:30001", url: "grpc://10.0.0.1:30001", target: "10.0.0.1:30001"},
		{in: "  grpc://worker-a:50051/ ", url: "grpc://worker-a:50051", target: "worker-a:50051"},
		{in: ":8000", url: "grpc://127.0.0.1:8000", target: "127.0.0.1:8000"},
		{in: "grpc://[::1]:9000", url: "grpc://[::1]:9000", target: "[::1]:9000"},
		{in: "http://worker1:8000", url: "grpc://worker1:8000", target: "worker1:8000"}, // SMG's examples write HTTP URLs
		{in: "grpcs://10.0.0.1:8000", url: "grpcs://10.0.0.1:8000", target: "10.0.0.1:8000"},
		{in: "https://worker1:8000/", url: "grpcs://worker1:8000", target: "worker1:8000"},
		{in: "GRPCS://worker1:8000", url: "grpcs://worker1:8000", target: "worker1:8000"},
		{in: "unix:///tmp/engine.sock", wantErr: true},
		{in: "ftp://10.0.0.1:8000", wantErr: true},
		{in: "10.0.0.1", wantErr: true},
		{in: "10.0.0.1:", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		url, target, err := workers.ParseAddress(tt.in)
		if (err != nil) != tt.wantErr || url != tt.url || target != tt.target {
			t.Errorf("ParseAddress(%q) = %q, %q, %v; want %q, %q, error %v", tt.in, url, target, err, tt.url, tt.target, tt.wantErr)
		}
		a, err := workers.ParseWorkerAddress(tt.in)
		wantTLS := strings.HasPrefix(tt.url, "grpcs://")
		if (err != nil) != tt.wantErr || a.URL != tt.url || a.Target != tt.target || a.TLS != wantTLS {
			t.Errorf("ParseWorkerAddress(%q) = %+v, %v; want TLS %v", tt.in, a, err, wantTLS)
		}
	}
}

func TestParseProtocol(t *testing.T) {
	tests := []struct {
		in      string
		want    workers.Protocol
		wantErr bool
	}{
		{"", workers.ProtocolUnknown, false},
		{"auto", workers.ProtocolUnknown, false},
		{"SGLang", workers.ProtocolSGLang, false},
		{" vllm ", workers.ProtocolVLLM, false},
		{"trtllm", workers.ProtocolTRTLLM, false},
		{" TRTLLM", workers.ProtocolTRTLLM, false},
		{"tensorrt", workers.ProtocolUnknown, true},
	}
	for _, tt := range tests {
		got, err := workers.ParseProtocol(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseProtocol(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func newTestWorker(url string) *workers.Worker {
	return workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
}

func TestRegistry(t *testing.T) {
	reg := workers.NewRegistry()
	a, b := newTestWorker("grpc://127.0.0.1:1"), newTestWorker("grpc://127.0.0.1:2")
	for _, w := range []*workers.Worker{a, b} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Add(newTestWorker("grpc://127.0.0.1:1")); err == nil {
		t.Error("Add accepted a second worker with the same URL")
	}

	snap := reg.Snapshot()
	if len(snap) != 2 || snap[0] != a || snap[1] != b {
		t.Fatalf("Snapshot = %v, want [a b] in registration order", snap)
	}
	snap[0] = nil
	if reg.Snapshot()[0] != a {
		t.Error("changing a snapshot changed the registry")
	}

	tests := []struct {
		addr string
		want *workers.Worker
	}{
		{"grpc://127.0.0.1:2", b},
		{"127.0.0.1:1", a},
		{"127.0.0.1:3", nil},
		{"not an address", nil},
	}
	for _, tt := range tests {
		got, ok := reg.Get(tt.addr)
		if got != tt.want || ok != (tt.want != nil) {
			t.Errorf("Get(%q) = %v, %v; want %v", tt.addr, got, ok, tt.want)
		}
	}
}

func TestRegistryCloseClosesEveryWorker(t *testing.T) {
	boom := errors.New("boom")
	var closed []string
	closer := func(name string, err error) func() error {
		return func() error { closed = append(closed, name); return err }
	}
	reg := workers.NewRegistry()
	for _, w := range []*workers.Worker{
		workers.NewWorker("grpc://h:1", workers.ProtocolVLLM, workers.RoleRegular, workers.ModelInfo{}, nil, closer("a", boom)),
		workers.NewWorker("grpc://h:2", workers.ProtocolVLLM, workers.RoleRegular, workers.ModelInfo{}, nil, nil),
		workers.NewWorker("grpc://h:3", workers.ProtocolVLLM, workers.RoleRegular, workers.ModelInfo{}, nil, closer("c", nil)),
	} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want the first closer's error", err)
	}
	if len(closed) != 2 {
		t.Errorf("closed %v, want a and c despite a's error", closed)
	}
}

func TestWorkerLoad(t *testing.T) {
	tests := []struct {
		name           string
		inFlightAtPoll int
		engine         workers.Load
		inFlightNow    int
		want           int
	}{
		{"never polled counts our own requests", 0, workers.Load{}, 3, 3},
		{"engine's extra requests are added", 2, workers.Load{Running: 4, Waiting: 3}, 2, 7},
		{"ours finished since the poll", 2, workers.Load{Running: 2}, 0, 0},
		{"new requests of ours since the poll", 1, workers.Load{Running: 1, Waiting: 2}, 4, 6},
		{"engine reports fewer than ours in flight", 5, workers.Load{Running: 1}, 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestWorker("grpc://127.0.0.1:9")
			var releases []func()
			for range tt.inFlightAtPoll {
				releases = append(releases, w.Acquire())
			}
			w.SetEngineLoad(tt.engine)
			for len(releases) > tt.inFlightNow {
				releases[0]()
				releases[0]() // release is idempotent
				releases = releases[1:]
			}
			for len(releases) < tt.inFlightNow {
				releases = append(releases, w.Acquire())
			}
			if w.InFlight() != tt.inFlightNow {
				t.Fatalf("InFlight = %d, want %d", w.InFlight(), tt.inFlightNow)
			}
			if got := w.Load(); got != tt.want {
				t.Errorf("Load = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLoadPollCountsOursOnWire checks the requests of ours a poll's answer may
// include: those in flight when the poll began and those started while it was
// on the wire, even if they have ended when the answer arrives. None of them
// may pass for another client's request.
func TestLoadPollCountsOursOnWire(t *testing.T) {
	tests := []struct {
		name                    string
		atBegin, started, ended int
		engine                  workers.Load
		want                    int
	}{
		{"ours ended before the answer", 1, 0, 1, workers.Load{Running: 1}, 0},
		{"ours started and ended on the wire", 0, 1, 1, workers.Load{Running: 1}, 0},
		{"ours started on the wire, still running", 0, 2, 0, workers.Load{Running: 2}, 2},
		{"another client's beside ours", 1, 0, 1, workers.Load{Running: 1, Waiting: 2}, 2},
		{"engine counts fewer than ours", 3, 1, 0, workers.Load{Running: 1}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestWorker("grpc://127.0.0.1:9")
			var releases []func()
			for range tt.atBegin {
				releases = append(releases, w.Acquire())
			}
			poll := w.BeginLoadPoll()
			for range tt.started {
				releases = append(releases, w.Acquire())
			}
			for range tt.ended {
				releases[0]()
				releases = releases[1:]
			}
			poll.Record(tt.engine)
			if got := w.Load(); got != tt.want {
				t.Errorf("Load = %d, want %d (in flight %d)", got, tt.want, w.InFlight())
			}
			if got := w.EngineLoad(); got != tt.engine {
				t.Errorf("EngineLoad = %+v, want %+v", got, tt.engine)
			}
		})
	}
}

func TestWorkerIdentityAndHealth(t *testing.T) {
	info := workers.ModelInfo{Model: "m", PageSize: 16}
	w := workers.NewWorker("grpc://h:7", workers.ProtocolVLLM, workers.RoleDecode, info, nil, nil)
	if w.URL() != "grpc://h:7" || w.String() != "grpc://h:7" || w.Protocol() != workers.ProtocolVLLM ||
		w.Role() != workers.RoleDecode || w.Info().PageSize != 16 {
		t.Errorf("identity: %v %v %v %+v", w.URL(), w.Protocol(), w.Role(), w.Info())
	}
	if !w.Healthy() {
		t.Error("a new worker should start healthy")
	}
	w.SetHealthy(false)
	if w.Healthy() {
		t.Error("SetHealthy(false) did not stick")
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close without closer = %v", err)
	}
	for p, s := range map[workers.Protocol]string{workers.ProtocolSGLang: "sglang", workers.ProtocolVLLM: "vllm", workers.ProtocolUnknown: "unknown"} {
		if p.String() != s {
			t.Errorf("%d.String() = %q, want %q", p, p.String(), s)
		}
	}
	for r, s := range map[workers.Role]string{workers.RoleRegular: "regular", workers.RolePrefill: "prefill", workers.RoleDecode: "decode"} {
		if r.String() != s {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), s)
		}
	}
}
