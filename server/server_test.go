package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers/sim"
)

func TestUnhealthyWorkerIsSkipped(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "round_robin", healthInterval: 10 * time.Millisecond,
		sim: func(i int, c *sim.Config) { c.Faults.Unhealthy = i == 1 }})
	w1, _ := f.reg.Get(f.workerURL(1))
	testutil.Eventually(t, "worker 1 to be marked unhealthy", func() bool { return !w1.Healthy() })

	for i := range 8 {
		c := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 4),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}).complete
		if c.Worker == f.workerURL(1) {
			t.Fatalf("request %d went to the unhealthy worker", i)
		}
	}
	resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range resp.Workers {
		want := kvgatev1.Health_HEALTH_HEALTHY
		if i == 1 {
			want = kvgatev1.Health_HEALTH_UNHEALTHY
		}
		if w.Address != f.workerURL(i) || w.Health != want {
			t.Errorf("worker %d: %s %v, want %s %v", i, w.Address, w.Health, f.workerURL(i), want)
		}
	}

	// A worker that recovers is used again.
	f.sims[1].Engine().SetFaults(sim.Faults{})
	testutil.Eventually(t, "worker 1 to recover", w1.Healthy)
}

func TestNoHealthyWorkerIsUnavailable(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, healthInterval: 10 * time.Millisecond,
		sim: func(_ int, c *sim.Config) { c.Faults.Unhealthy = true }})
	hc := healthpb.NewHealthClient(f.conn)
	testutil.Eventually(t, "the router's health to report NOT_SERVING", func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "kvgate.v1.Router"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_NOT_SERVING
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 4)})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no healthy worker") {
		t.Fatalf("err = %v, want UNAVAILABLE naming 'no healthy worker'", err)
	}
}

func TestListWorkersDescribesTheFleet(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		want     kvgatev1.Protocol
	}{
		{"sglang", kvgatev1.Protocol_PROTOCOL_SGLANG},
		{"vllm", kvgatev1.Protocol_PROTOCOL_VLLM},
		{"trtllm", kvgatev1.Protocol_PROTOCOL_TRTLLM},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: tc.protocol, workers: 2})
			resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Workers) != 2 {
				t.Fatalf("%d workers listed, want 2", len(resp.Workers))
			}
			for i, w := range resp.Workers {
				if w.Address != f.workerURL(i) || w.Protocol != tc.want ||
					w.Role != kvgatev1.Role_ROLE_REGULAR || w.Health != kvgatev1.Health_HEALTH_HEALTHY ||
					w.Model != sim.DefaultConfig().Model || w.InFlight != 0 {
					t.Errorf("worker %d = %v", i, w)
				}
			}
		})
	}
}

func TestHealthAndReflectionServices(t *testing.T) {
	f := startFleet(t, fleetOptions{})
	hc := healthpb.NewHealthClient(f.conn)
	for _, svc := range []string{"", "kvgate.v1.Router"} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q = %v, %v; want SERVING", svc, r, err)
		}
	}

	st, err := reflectionpb.NewServerReflectionClient(f.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	for _, want := range []string{"kvgate.v1.Router", "kvgate.v1.Admin", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	st.CloseSend()
}

// TestPanicBecomesInternal registers a service whose handler panics and checks
// that the caller gets INTERNAL while the router keeps serving.
func TestPanicBecomesInternal(t *testing.T) {
	desc := grpc.ServiceDesc{
		ServiceName: "kvgate.test.Panicker",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Panic",
			Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
				req := new(emptypb.Empty)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(context.Context, any) (any, error) { panic("boom") }
				if in == nil {
					return h(ctx, req)
				}
				return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/kvgate.test.Panicker/Panic"}, h)
			},
		}},
	}
	f := startFleet(t, fleetOptions{beforeServe: func(s *server.Server) { s.GRPC().RegisterService(&desc, struct{}{}) }})
	err := f.conn.Invoke(context.Background(), "/kvgate.test.Panicker/Panic", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Internal {
		t.Fatalf("err = %v, want INTERNAL", err)
	}
	f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
}

func TestMetricsCountRequestsSelectionsAndErrors(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin"})
	for i := range 4 {
		f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 4), Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
	}
	_, _ = f.generate(context.Background(), t, &kvgatev1.GenerateRequest{})

	reg := f.srv.Metrics().Registry
	expect := func(name string, want float64, labels ...string) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := 0.0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue metric
					}
				}
				switch {
				case m.Counter != nil:
					got += m.Counter.GetValue()
				case m.Gauge != nil:
					got += m.Gauge.GetValue()
				case m.Histogram != nil:
					got += float64(m.Histogram.GetSampleCount())
				}
			}
		}
		if got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	const gen = "/kvgate.v1.Router/Generate"
	expect("kvgate_requests_total", 4, "method", gen, "code", "OK")
	expect("kvgate_request_errors_total", 1, "method", gen, "code", "InvalidArgument")
	expect("kvgate_worker_selections_total", 2, "worker", f.workerURL(0), "policy", "round_robin")
	expect("kvgate_worker_selections_total", 2, "worker", f.workerURL(1), "policy", "round_robin")
	expect("kvgate_time_to_first_token_seconds", 4)
	expect("kvgate_request_duration_seconds", 5, "method", gen)
	expect("kvgate_worker_healthy", 2)
	expect("kvgate_worker_active_requests", 0)
}
