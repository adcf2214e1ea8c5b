package discovery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kvgate/kvgate/workers"
)

// target is a worker a pod asks for.
type target struct {
	addr      string // grpc://podIP:port, the worker's URL
	role      workers.Role
	bootstrap int    // prefill only; 0: the port the engine reports
	pod       string // namespace/name
}

// sameWorker reports whether t and u are the same worker to the fleet: a
// change of role or bootstrap port means removing it and adding it again.
func (t target) sameWorker(u target) bool {
	return t.addr == u.addr && t.role == u.role && t.bootstrap == u.bootstrap
}

// selected is one selector's informer: the pods it holds play role.
type selected struct {
	role  workers.Role
	sel   labels.Selector
	store cache.Store
}

// watches are the informers, one per selector, and the channel through
// which they wake the reconcile loop.
//
// One informer per selector, each listing with its label selector, keeps the
// router's cache to the fleet's own pods (a cluster's other pods may be
// thousands), at the cost of a second watch with PD; a single informer
// would have to watch every pod of the namespace, since Kubernetes cannot
// OR two selectors.
type watches struct {
	sets []selected
	// kick holds at most one wake-up: events that arrive while the loop
	// works collapse into one more pass over the caches.
	kick    chan struct{}
	running sync.WaitGroup
}

func startWatches(ctx context.Context, cfg Config, log *slog.Logger) (*watches, error) {
	w := &watches{kick: make(chan struct{}, 1)}
	roles := []struct {
		role workers.Role
		set  map[string]string
	}{{workers.RoleRegular, cfg.Regular}, {workers.RolePrefill, cfg.Prefill}, {workers.RoleDecode, cfg.Decode}}
	wake := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(any) { wake() },
	}
	pods := cfg.Pods(cfg.Namespace)
	var infs []cache.SharedIndexInformer
	for _, r := range roles {
		if len(r.set) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(r.set)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel.String()
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel.String()
				return pods.Watch(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, pods), &corev1.Pod{}, 0, cache.Indexers{})
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("watch %s pods: %w", r.role, err)
		}
		logWatch := log.With("role", r.role.String(), "selector", sel.String(), "namespace", cmp.Or(cfg.Namespace, "(all)"))
		// The default handler logs through klog; this one says, in the
		// router's log, what to do about the usual cause.
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if apierrors.IsForbidden(err) {
				logWatch.Error("the service account may not list or watch pods; grant it deploy/kubernetes/rbac.yaml's role", "error", err)
				return
			}
			logWatch.Warn("watching pods failed; listing them again", "error", err)
		}); err != nil {
			return nil, fmt.Errorf("watch %s pods: %w", r.role, err)
		}
		w.sets = append(w.sets, selected{role: r.role, sel: sel, store: inf.GetStore()})
		infs = append(infs, inf)
	}
	for _, inf := range infs {
		w.running.Go(func() { inf.RunWithContext(ctx) })
	}
	return w, nil
}

// shutdown waits for the informers, which stop when Run's context ends.
func (w *watches) shutdown() { w.running.Wait() }

// desired is the fleet the caches ask for, by worker address, and for each
// pod that cannot join although selected a note saying why (pods that are
// merely not ready yet have none).
//
// A pod that matches both the prefill and the decode selector is neither: it
// is left out, with a note, rather than given a role by the order of the
// flags.
func (w *watches) desired(cfg Config) (map[string]target, map[string]string) {
	roles := map[string][]workers.Role{}
	pods := map[string]*corev1.Pod{}
	for _, s := range w.sets {
		for _, obj := range s.store.List() {
			pod, ok := obj.(*corev1.Pod)
			// The server filters by label; matching again costs little and
			// keeps a lenient API (or a fake one) from adding strangers.
			if !ok || !s.sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			key := pod.Namespace + "/" + pod.Name
			pods[key] = pod
			roles[key] = append(roles[key], s.role)
		}
	}
	keys := make([]string, 0, len(pods))
	for k := range pods {
		keys = append(keys, k)
	}
	slices.Sort(keys) // two pods claiming one address: the first by name wins, every time
	want := make(map[string]target, len(pods))
	notes := map[string]string{}
	for _, key := range keys {
		if len(roles[key]) > 1 {
			notes[key] = "the pod matches both --prefill-selector and --decode-selector; it joins as neither"
			continue
		}
		t, note, ok := podTarget(pods[key], roles[key][0], cfg.Port, cfg.scheme())
		if note != "" {
			notes[key] = note
		}
		if !ok {
			continue
		}
		if other, dup := want[t.addr]; dup {
			notes[key] = fmt.Sprintf("the pod's address %s is also pod %s's; only that one joins", t.addr, other.pod)
			continue
		}
		want[t.addr] = t
	}
	return want, notes
}

// podTarget is the worker pod asks for, if it may join now: it runs, is
// Ready, is not being deleted, and has an IP. Its address is
// scheme://IP:port. note explains a pod that is ready but cannot join (a
// malformed annotation).
func podTarget(pod *corev1.Pod, role workers.Role, port int, scheme string) (t target, note string, ok bool) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || !podReady(pod) {
		return target{}, "", false
	}
	if s, set := pod.Annotations[PortAnnotation]; set {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return target{}, fmt.Sprintf("annotation %s=%q is not a port", PortAnnotation, s), false
		}
		port = p
	}
	t = target{
		addr: scheme + "://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)),
		role: role,
		pod:  pod.Namespace + "/" + pod.Name,
	}
	if role == workers.RolePrefill {
		for _, name := range []string{BootstrapPortAnnotation, SGLangBootstrapPortAnnotation} {
			s, set := pod.Annotations[name]
			if !set {
				continue
			}
			p, err := strconv.Atoi(s)
			if err != nil || p < 1 || p > 65535 {
				return target{}, fmt.Sprintf("annotation %s=%q is not a port", name, s), false
			}
			t.bootstrap = p
			break
		}
	}
	return t, "", true
}

// podReady reports the pod's Ready condition: its containers pass their
// readiness probes, as a Service's endpoints require.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
