package discovery_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/discovery"
)

// NewClient loads credentials as kubectl does: KUBECONFIG names the file
// (its context's namespace comes back), and with no configuration at all,
// outside a pod, the error says what to provide.
func TestNewClientLoadsKubeconfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod, whatever runs the test
	t.Setenv("KUBECONFIG", filepath.Join(home, "absent"))
	if _, _, err := discovery.NewClient(); err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("without a configuration: %v, want an error naming KUBECONFIG", err)
	}

	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
  - name: c
    cluster:
      server: https://127.0.0.1:1
contexts:
  - name: x
    context:
      cluster: c
      user: u
      namespace: llm
current-context: x
users:
  - name: u
    user:
      token: not-a-secret
`
	path := filepath.Join(home, "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	pods, ns, err := discovery.NewClient()
	if err != nil || pods == nil || ns != "llm" {
		t.Fatalf("NewClient() = %v, %q, %v; want a client for namespace llm", pods != nil, ns, err)
	}
}
