package discovery

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient connects to the Kubernetes API as kubectl would: from the files
// KUBECONFIG names, else ~/.kube/config, and inside a pod without either,
// from the pod's service account. It also returns the namespace that
// configuration names (the pod's own in a cluster), for callers that want
// it; an empty --service-discovery-namespace does not use it, and watches
// every namespace.
func NewClient() (kubernetes.Interface, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no Kubernetes configuration (run in a pod with a service account, or set KUBECONFIG): %w", err)
	}
	rc.UserAgent = "kvgate"
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("Kubernetes client: %w", err)
	}
	return cs, ns, nil
}
