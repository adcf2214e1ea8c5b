package discovery

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient connects to the Kubernetes API as kubectl would: from the files
// KUBECONFIG names, else ~/.kube/config, and inside a pod without either,
// from the pod's service account. It returns Config.Pods and the namespace
// that configuration names (the pod's own in a cluster), for callers that
// want it; an empty --service-discovery-namespace does not use it, and
// watches every namespace.
//
// The client knows core/v1 pods and nothing else (see PodClient).
func NewClient() (pods func(namespace string) PodClient, namespace string, err error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no Kubernetes configuration (run in a pod with a service account, or set KUBECONFIG): %w", err)
	}
	if namespace, _, err = loader.Namespace(); err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	c, err := podsREST(rc)
	if err != nil {
		return nil, "", err
	}
	return func(ns string) PodClient { return restPods{c: c, ns: ns} }, namespace, nil
}

// podsREST is a REST client for the core/v1 API whose scheme holds only
// core/v1's types.
func podsREST(rc *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("core/v1 scheme: %w", err)
	}
	cfg := rest.CopyConfig(rc)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.UserAgent = "kvgate"
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes client: %w", err)
	}
	return c, nil
}

// restPods is one namespace's pods ("": all) through the REST client.
type restPods struct {
	c  *rest.RESTClient
	ns string
}

// List and Watch return the API's errors as they are: the informers' retry
// logic reads their status (expired, too many requests) as client-go's own
// clients return it.
func (p restPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.c.Get().Namespace(p.ns).Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (p restPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.c.Get().Namespace(p.ns).Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}
