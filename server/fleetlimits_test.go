package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
)

// Admin.AddWorker connects only to hosts the operator allows: by default
// the hosts of the workers given at start-up (loopback here), any port.
// Anything else is FAILED_PRECONDITION naming --admin-worker-allow, and
// the router dials nothing (the fleet is unchanged).
func TestAddWorkerOnlyToAllowedHosts(t *testing.T) {
	tests := []struct {
		name  string
		allow []string // nil: the default
		addr  string
		want  codes.Code
	}{
		{"another host, by default", nil, "10.9.9.9:8000", codes.FailedPrecondition},
		{"a name, by default", nil, "grpc://metadata.internal:80", codes.FailedPrecondition},
		{"a start-up worker's host, another port", nil, "127.0.0.1:1", codes.OK},
		{"outside the allowed prefix", []string{"10.0.0.0/8"}, "127.0.0.1:1", codes.FailedPrecondition},
		{"a name under the allowed domain", []string{"*.llm.svc"}, "grpcs://p-0.llm.svc:8000", codes.OK},
		{"a name outside it", []string{"*.llm.svc"}, "p-0.other.svc:8000", codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) { c.AdminWorkerAllow = tt.allow }})
			ctx := context.Background()
			_, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: tt.addr})
			if status.Code(err) != tt.want {
				t.Fatalf("AddWorker(%s): %v, want %v", tt.addr, err, tt.want)
			}
			if tt.want != codes.OK {
				if !strings.Contains(status.Convert(err).Message(), "--admin-worker-allow") {
					t.Errorf("the refusal does not name --admin-worker-allow: %v", err)
				}
				if n := len(f.reg.Snapshot()); n != 1 {
					t.Errorf("the fleet has %d workers after a refused AddWorker, want 1", n)
				}
			}
		})
	}
}

// The fleet holds at most MaxWorkers engines, however many AddWorker calls
// race for the last places: the rest are RESOURCE_EXHAUSTED naming
// --max-workers.
func TestAddWorkerCappedAtMaxWorkers(t *testing.T) {
	const max, calls = 4, 24
	f := startFleet(t, fleetOptions{workers: 2, config: func(c *router.Config) { c.MaxWorkers = max }})
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		// Closed loopback ports: the engines are added unconnected, as
		// dead workers were in the attack.
		wg.Go(func() {
			_, errs[i] = f.admin.AddWorker(context.Background(), &kvgatev1.AddWorkerRequest{Address: fmt.Sprintf("127.0.0.1:%d", i+1)})
		})
	}
	wg.Wait()
	added, refused := 0, 0
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			added++
		case codes.ResourceExhausted:
			refused++
			if !strings.Contains(status.Convert(err).Message(), "--max-workers") {
				t.Errorf("the refusal does not name --max-workers: %v", err)
			}
		default:
			t.Errorf("AddWorker: %v, want OK or RESOURCE_EXHAUSTED", err)
		}
	}
	if added != max-2 || refused != calls-added {
		t.Errorf("%d added and %d refused, want %d added and the rest refused", added, refused, max-2)
	}
	if n := len(f.reg.Snapshot()); n != max {
		t.Errorf("the fleet has %d workers, want %d", n, max)
	}
}
