// Package discovery keeps a router's fleet equal to the Kubernetes pods that
// match its label selectors: a pod joins when it is Running and Ready, and is
// drained and removed when it stops being Ready, is deleted, or changes its
// address.
//
// It watches pods with client-go informers and never touches the fleet from
// an informer's callback: callbacks only wake one reconcile loop, which
// compares what the informers' caches say should be in the fleet with what
// it has put there, and starts the joins and drains that close the gap.
// Because the loop reads the whole cache each time rather than replaying
// events, it converges after anything the informers do, a relist after a
// dropped watch included (a pod deleted while the watch was down is simply
// no longer in the cache).
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kvgate/kvgate/workers"
)

// Registrar is the router's set of workers as discovery changes it;
// *router.Router implements it. AddWorker detects the engine's protocol
// and model as for any worker; RemoveWorker drains first (0: the fleet's
// default drain timeout).
type Registrar interface {
	AddWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error)
	RemoveWorker(ctx context.Context, addr string, drain time.Duration) (*workers.Worker, int, error)
}

// Annotations a pod may carry.
const (
	// BootstrapPortAnnotation is a prefill pod's PD bootstrap port. Without
	// it the router uses the port the engine reports.
	BootstrapPortAnnotation = "kvgate.io/bootstrap-port"
	// SGLangBootstrapPortAnnotation is SGLang's router's name for the same
	// annotation, read when the kvgate one is absent, so that pods
	// annotated for it need no change.
	SGLangBootstrapPortAnnotation = "sglang.ai/bootstrap-port"
	// PortAnnotation overrides Config.Port for one pod: the engine's gRPC
	// port, for fleets whose engines do not all listen on the same one.
	PortAnnotation = "kvgate.io/port"
)

// DefaultPort is the engines' gRPC port when none is configured: SGLang's
// router's default, so that its command lines mean the same here.
const DefaultPort = 80

// PodClient lists and watches pods: what discovery needs of the Kubernetes
// API, and all of it. client-go's typed PodInterface satisfies it. Asking
// for no more keeps kvgate's binary free of the clientset's other API groups
// (the full clientset and informer factory triple its size).
//
// A PodClient whose API cannot stream a list through a watch (client-go's
// fake clientset) says so with a method IsWatchListSemanticsUnSupported()
// bool returning true; the informers then list.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Config says which pods are the router's workers.
type Config struct {
	// Pods reads a namespace's pods ("": every namespace). NewClient
	// builds it from a kubeconfig or the pod's service account; client-go's
	// typed clients fit too (CoreV1().Pods).
	Pods func(namespace string) PodClient
	// Namespace to watch; "" watches every namespace the service account
	// may list pods in (a ClusterRole).
	Namespace string
	// PD makes the fleet prefill and decode workers: Prefill and Decode
	// select them, and Regular must be empty. Without PD, Regular selects
	// the workers and Prefill and Decode must be empty. A pod must carry
	// every label of a selector to match it.
	PD                       bool
	Regular, Prefill, Decode map[string]string
	// Port is the engines' gRPC port on the pods' IPs (PortAnnotation
	// overrides it per pod).
	Port int
	// TLS dials the engines as grpcs://POD_IP:PORT (their certificates
	// must be valid for the pod's IP); otherwise grpc://, plaintext.
	TLS bool
	// Drain is how long a leaving pod's requests may finish; 0 means the
	// fleet's default.
	Drain time.Duration
	// RetryMin and RetryMax bound the backoff between attempts to add a pod
	// the fleet refused (an address already registered, say): each failure
	// doubles the wait, from RetryMin up to RetryMax.
	RetryMin, RetryMax time.Duration
	Logger             *slog.Logger
}

// scheme is how the engines are dialled.
func (c Config) scheme() string {
	if c.TLS {
		return "grpcs"
	}
	return "grpc"
}

// DefaultConfig watches every namespace for the engines' gRPC port
// DefaultPort, drains with the fleet's default and retries refused pods
// from half a second to half a minute apart.
func DefaultConfig() Config {
	return Config{Port: DefaultPort, RetryMin: 500 * time.Millisecond, RetryMax: 30 * time.Second}
}

// Validate reports a configuration that cannot select a fleet, naming the
// flag to change. It does not check Pods (Run does), so that the flags
// can be checked before a client is made.
func (c Config) Validate() error {
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("--service-discovery-port is %d; it must be a port, 1 to 65535", c.Port)
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("retry backoff %v to %v: want 0 < min <= max", c.RetryMin, c.RetryMax)
	}
	if c.Drain < 0 {
		return fmt.Errorf("drain timeout is %v; it must be >= 0", c.Drain)
	}
	for _, s := range []struct {
		flag string
		sel  map[string]string
	}{{"--selector", c.Regular}, {"--prefill-selector", c.Prefill}, {"--decode-selector", c.Decode}} {
		if _, err := labels.ValidatedSelectorFromSet(s.sel); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	if c.PD {
		switch {
		case len(c.Prefill) == 0 || len(c.Decode) == 0:
			return errors.New("service discovery with --pd-disaggregation needs --prefill-selector and --decode-selector")
		case len(c.Regular) > 0:
			return errors.New("with --pd-disaggregation, pods are selected by --prefill-selector and --decode-selector, not --selector")
		case contains(c.Decode, c.Prefill):
			return errors.New("--decode-selector has every label of --prefill-selector: each decode pod would match both selectors (and join as neither)")
		case contains(c.Prefill, c.Decode):
			return errors.New("--prefill-selector has every label of --decode-selector: each prefill pod would match both selectors (and join as neither)")
		}
		return nil
	}
	switch {
	case len(c.Regular) == 0:
		return errors.New("service discovery needs --selector key=value (the labels of the engines' pods)")
	case len(c.Prefill) > 0 || len(c.Decode) > 0:
		return errors.New("--prefill-selector and --decode-selector need --pd-disaggregation")
	}
	return nil
}

// contains reports whether set has every label of sub: a pod matching set
// then matches sub too.
func contains(set, sub map[string]string) bool {
	for k, v := range sub {
		if w, ok := set[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ParseSelector reads key=value pairs, as the selector flags give them.
func ParseSelector(pairs []string) (map[string]string, error) {
	sel := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", p)
		}
		if old, dup := sel[k]; dup && old != v {
			return nil, fmt.Errorf("label %q is given twice, as %q and %q", k, old, v)
		}
		sel[k] = v
	}
	if _, err := labels.ValidatedSelectorFromSet(sel); err != nil {
		return nil, err
	}
	return sel, nil
}

// Run watches the pods and changes fleet until ctx ends; it returns ctx's
// error then, or at once a configuration error. Workers it added stay in
// the fleet when it returns (the router is shutting down).
func Run(ctx context.Context, fleet Registrar, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Pods == nil {
		return errors.New("service discovery needs a Kubernetes client")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := startWatches(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer w.shutdown() // after cancel (deferred later, run first)
	defer cancel()
	r := newReconciler(fleet, cfg, log)
	return r.run(ctx, w)
}
