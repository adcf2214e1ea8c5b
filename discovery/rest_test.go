package discovery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// apiServer answers what an API server answers to a pod informer, for one
// namespace's pods: a list, or a watch that streams the pods as ADDED
// events and the bookmark that ends the initial events (the informers'
// watch-list), then stays open. It records the label selectors asked for.
type apiServer struct {
	pods      []corev1.Pod
	mu        sync.Mutex
	selectors []string
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/namespaces/llm/pods" {
		http.Error(w, "not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	a.mu.Lock()
	a.selectors = append(a.selectors, q.Get("labelSelector"))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: a.pods}
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	enc := json.NewEncoder(w)
	if q.Get("sendInitialEvents") == "true" {
		for _, p := range a.pods {
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": p})
		}
		_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{
			"kind": "Pod", "apiVersion": "v1",
			"metadata": map[string]any{"resourceVersion": "7", "annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
		}})
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// recorder is a Registrar that records the workers added.
type recorder struct{ added chan string }

func (r recorder) AddWorker(_ context.Context, addr string, role workers.Role, _ workers.Protocol, _ int) (*workers.Worker, error) {
	r.added <- role.String() + " " + addr
	return workers.NewWorker(addr, workers.ProtocolSGLang, role, workers.ModelInfo{}, nil, nil), nil
}

func (recorder) RemoveWorker(context.Context, string, time.Duration) (*workers.Worker, int, error) {
	return nil, 0, workers.ErrWorkerNotFound
}

// NewClient's client reads pods from a real HTTP API: the path of the
// namespace, the label selector, and the JSON of lists and watch events
// decoded with core/v1's types alone.
func TestNewClientReadsPodsOverHTTP(t *testing.T) {
	ready := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "llm", ResourceVersion: "5", Labels: map[string]string{"app": "engine"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	api := &apiServer{pods: []corev1.Pod{ready}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	home := t.TempDir()
	path := filepath.Join(home, "config")
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + srv.URL + "}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u, namespace: llm}}]\ncurrent-context: x\nusers: [{name: u, user: {}}]\n"
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", path)
	pods, ns, err := discovery.NewClient()
	if err != nil {
		t.Fatal(err)
	}

	cfg := discovery.DefaultConfig()
	cfg.Pods, cfg.Namespace, cfg.Port, cfg.Regular = pods, ns, 8000, map[string]string{"app": "engine"}
	fleet := recorder{added: make(chan string, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- discovery.Run(ctx, fleet, cfg) }()
	if got := testutil.Receive(t, fleet.added, "a worker added from the API's pods"); got != "regular grpc://10.0.0.7:8000" {
		t.Errorf("added %q, want the pod's worker", got)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, s := range api.selectors {
		if s != "app=engine" {
			t.Errorf("the API was asked for labelSelector %q, want app=engine", s)
		}
	}
}
