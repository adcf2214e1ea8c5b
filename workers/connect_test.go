package workers_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// otherService serves only the standard gRPC health service: a gRPC server,
// but not an engine.
func otherService(t *testing.T) string {
	return testutil.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) })
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		want    workers.Protocol
		wantErr error
	}{
		{"sglang", (&sglangEngine{}).start(t), workers.ProtocolSGLang, nil},
		{"vllm", (&vllmEngine{}).start(t), workers.ProtocolVLLM, nil},
		{"neither", otherService(t), workers.ProtocolUnknown, workers.ErrUnknownEngine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := workers.Detect(testutil.Context(t, 5*time.Second), testutil.Dial(t, tt.addr))
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("Detect = %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestConnect(t *testing.T) {
	sgl := (&sglangEngine{
		modelInfo:  &sglang.GetModelInfoResponse{ServedModelName: "sgl-model", VocabSize: 1000},
		serverInfo: &sglang.GetServerInfoResponse{MaxTotalNumTokens: 4096},
	}).start(t)
	vll := (&vllmEngine{modelInfo: &vllm.GetModelInfoResponse{ServedModelName: "vllm-model"}}).start(t)

	tests := []struct {
		name      string
		addr      string
		opts      workers.ConnectOptions
		wantProto workers.Protocol
		wantModel string
	}{
		{"detect sglang", sgl, workers.ConnectOptions{}, workers.ProtocolSGLang, "sgl-model"},
		{"detect vllm from URL", "grpc://" + vll, workers.ConnectOptions{Role: workers.RoleDecode}, workers.ProtocolVLLM, "vllm-model"},
		{"explicit sglang", "grpc://" + sgl + "/", workers.ConnectOptions{Protocol: workers.ProtocolSGLang, Role: workers.RolePrefill}, workers.ProtocolSGLang, "sgl-model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), tt.addr, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			wantURL, _, _ := workers.ParseAddress(tt.addr)
			if w.URL() != wantURL || w.Protocol() != tt.wantProto || w.Role() != tt.opts.Role ||
				w.Info().Model != tt.wantModel || !w.Healthy() {
				t.Errorf("worker %s: protocol %v role %v info %+v healthy %v", w.URL(), w.Protocol(), w.Role(), w.Info(), w.Healthy())
			}
			if err := w.Backend().Health(testutil.Context(t, 5*time.Second)); err != nil {
				t.Errorf("Health over the worker's connection: %v", err)
			}
		})
	}
}

func TestConnectErrors(t *testing.T) {
	sgl := (&sglangEngine{}).start(t)
	down := closedPort(t)
	neither := otherService(t)

	tests := []struct {
		name     string
		addr     string
		opts     workers.ConnectOptions
		wantCode codes.Code // checked when not OK
		wantMsg  []string
	}{
		{"malformed address", "ftp://" + sgl, workers.ConnectOptions{}, codes.OK, []string{"ftp://" + sgl}},
		{"TLS to a plaintext engine", "grpcs://" + sgl, workers.ConnectOptions{}, codes.Unavailable, []string{"grpcs://" + sgl, "TLS handshake failed"}},
		{"missing port", "localhost", workers.ConnectOptions{}, codes.OK, []string{"localhost"}},
		{"unreachable", down, workers.ConnectOptions{Timeout: 2 * time.Second}, codes.Unavailable, []string{"grpc://" + down, "unreachable"}},
		{"unreachable, protocol given", down, workers.ConnectOptions{Protocol: workers.ProtocolVLLM, Timeout: 2 * time.Second}, codes.Unavailable, []string{"grpc://" + down, "unreachable"}},
		{"not an engine", neither, workers.ConnectOptions{}, codes.OK, []string{"grpc://" + neither, "speaks none of", "trtllm.TrtllmService"}},
		{"wrong protocol given", sgl, workers.ConnectOptions{Protocol: workers.ProtocolVLLM}, codes.Unimplemented, []string{"grpc://" + sgl, "vllm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), tt.addr, tt.opts)
			if err == nil {
				w.Close()
				t.Fatal("Connect succeeded")
			}
			if time.Since(start) > 3*time.Second {
				t.Errorf("Connect took %v to fail", time.Since(start))
			}
			if tt.wantCode != codes.OK && status.Code(err) != tt.wantCode {
				t.Errorf("code = %v, want %v (%v)", status.Code(err), tt.wantCode, err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}
