package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// SMG's documented service discovery command line, space-separated values and all,
// is accepted, and serves: pods labelled role=prefill and role=decode on a
// (fake) Kubernetes API join as prefill and decode workers, and a request
// goes through both. The pods' engines are simulated on loopback, each
// pod's port annotation naming its engine's port; the flag's 8000 is what
// pods without one would use.
func TestServeSMGServiceDiscoveryCommandLine(t *testing.T) {
	line := strings.Fields("--pd-disaggregation --service-discovery --prefill-selector role=prefill --decode-selector role=decode --service-discovery-port 8000")
	cfg := defaults(t, append(line, "--port", "0", "--prometheus-port", "-1")...)
	if cfg.discovery.port != 8000 || cfg.discovery.prefill.String() != "role=prefill" || cfg.discovery.decode.String() != "role=decode" {
		t.Fatalf("parsed %+v", cfg.discovery)
	}
	k8s := fake.NewClientset()
	cfg.discovery.client = func() (func(string) discovery.PodClient, error) {
		return func(ns string) discovery.PodClient { return listOnly{k8s.CoreV1().Pods(ns)} }, nil
	}
	for i, role := range []string{sim.RolePrefill, sim.RoleDecode} {
		c := sim.DefaultConfig()
		c.TimeScale, c.Role, c.Logger = 0, role, slog.New(slog.DiscardHandler)
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		_, port, _ := net.SplitHostPort(s.Addr())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: "default", Labels: map[string]string{"role": role},
				Annotations: map[string]string{discovery.PortAnnotation: port}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		if _, err := k8s.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(i, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { addrs <- l.grpc }) }()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	// The router is ready before the pods have joined: until they have,
	// requests answer UNAVAILABLE, which a client retries.
	testutil.Eventually(t, "an answer other than UNAVAILABLE", func() bool {
		err = generateOnce(rctx, conn)
		return status.Code(err) != codes.Unavailable || rctx.Err() != nil
	})
	if err != nil {
		t.Fatalf("Generate through the discovered fleet: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// listOnly tells the informers that the fake API cannot stream a list
// through a watch, as the fake clientset itself tells client-go's.
type listOnly struct{ corev1client.PodInterface }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// generateOnce sends one Generate and checks its completion names distinct
// prefill and decode workers.
func generateOnce(ctx context.Context, conn *grpc.ClientConn) error {
	st, err := kvgatev1.NewRouterClient(conn).Generate(ctx, &kvgatev1.GenerateRequest{
		InputIds: []uint32{1, 2, 3, 4}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(4)}})
	if err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if c := m.GetComplete(); c != nil {
			if c.PrefillWorker == "" || c.Worker == c.PrefillWorker {
				return fmt.Errorf("completion %v: want distinct prefill and decode workers", c)
			}
			return nil
		}
	}
}
