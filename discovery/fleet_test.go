package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

const ns = "llm"

// The PD selectors: distinct keys, so that one pod can match both.
var prefillSel, decodeSel = map[string]string{"prefill": "yes"}, map[string]string{"decode": "yes"}

// cluster is a router whose fleet comes from service discovery over a fake
// Kubernetes API (client-go's own fake clientset, watches included), in
// front of simulated engines on loopback that play the pods' engines: each
// pod's kvgate.io/port annotation names its engine's port.
type cluster struct {
	t      testing.TB
	k8s    *fake.Clientset
	g      *router.Router
	router kvgatev1.RouterClient
	// open are the pod watches the informers opened, so that a test can
	// drop them; failWatch makes new ones, and lists, fail: the API is
	// unreachable.
	mu        sync.Mutex
	open      []watch.Interface
	failWatch atomic.Bool
	// refused counts the lists and watches refused while failWatch holds:
	// each is an informer that tried to see the API and could not.
	refused atomic.Int64
}

type clusterOptions struct {
	pd      bool
	sel     map[string]string // regular workers; default app=engine
	static  []string          // --worker-urls beside discovery
	retries time.Duration     // RetryMin; default 20ms
	log     io.Writer         // the router's log, as text; default none (-v: the test's output)
	igw     bool              // many models, as kvgate serve --service-discovery runs
}

func startCluster(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	c := &cluster{t: t, k8s: fake.NewClientset()}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	c.k8s.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if c.failWatch.Load() {
			c.refused.Add(1)
			return true, nil, errors.New("injected: list refused")
		}
		return false, nil, nil // the tracker answers
	})
	c.k8s.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if c.failWatch.Load() {
			c.refused.Add(1)
			return true, nil, errors.New("injected: watch refused")
		}
		w, err := c.k8s.Tracker().Watch(pods, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		c.mu.Lock()
		c.open = append(c.open, w)
		c.mu.Unlock()
		return true, w, nil
	})
	dc := discovery.DefaultConfig()
	dc.Pods, dc.Namespace, dc.PD = fakePods(c.k8s), ns, o.pd
	dc.RetryMin = 20 * time.Millisecond
	if o.retries > 0 {
		dc.RetryMin = o.retries
	}
	dc.Drain = 2 * time.Second
	if o.pd {
		dc.Prefill, dc.Decode = prefillSel, decodeSel
	} else {
		dc.Regular = o.sel
		if dc.Regular == nil {
			dc.Regular = map[string]string{"app": "engine"}
		}
	}
	cfg := router.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(o.log, nil))
	}
	cfg.Policy = "round_robin"
	cfg.PD = o.pd
	cfg.TokenIDsOnly = true
	cfg.LoadPollInterval = 50 * time.Millisecond
	cfg.Health = workers.HealthConfig{Interval: time.Hour, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1}
	cfg.WorkerURLs = o.static
	cfg.Discovery = &dc
	cfg.IGW = o.igw
	g, err := router.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.g = g
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c.router = kvgatev1.NewRouterClient(conn)
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	// The fake API does not replay what happened between an informer's
	// list and its watch (a real one resumes from the list's version):
	// pods are created once every informer watches.
	informers := 1
	if o.pd {
		informers = 2
	}
	testutil.EventuallyState(t, testutil.Patience, fmt.Sprintf("%d informers to watch pods", informers), func() (bool, string) {
		n := c.watching()
		return n >= informers, fmt.Sprintf("%d watch", n)
	})
	return c
}

func (c *cluster) watching() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// dropWatches stops every watch the informers have open.
func (c *cluster) dropWatches() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.open {
		w.Stop()
	}
	c.open = nil
}

// engine starts a simulated engine for a pod and stops it when the test ends.
func engine(t testing.TB, role string) *sim.Process {
	t.Helper()
	c := sim.DefaultConfig()
	c.TimeScale = 0
	c.Logger = slog.New(slog.DiscardHandler)
	c.Role = role
	if role == sim.RoleDecode {
		c.BootstrapTimeout = 300 * time.Millisecond
	}
	s, err := sim.Start(c, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// podOf is a Running pod for engine s with the given labels, Ready or not.
func podOf(name string, s *sim.Process, ready bool, lbls map[string]string) *corev1.Pod {
	_, port, _ := net.SplitHostPort(s.Addr())
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls,
			Annotations: map[string]string{discovery.PortAnnotation: port}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
	setReady(p, ready)
	return p
}

func setReady(p *corev1.Pod, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
}

func (c *cluster) create(p *corev1.Pod) {
	c.t.Helper()
	if _, err := c.k8s.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) update(p *corev1.Pod) {
	c.t.Helper()
	if _, err := c.k8s.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) delete(name string) {
	c.t.Helper()
	if err := c.k8s.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// fleet is the router's workers as "role url" strings, sorted.
func (c *cluster) fleet() []string {
	var out []string
	for _, w := range c.g.Registry.Snapshot() {
		out = append(out, w.Role().String()+" "+w.URL())
	}
	slices.Sort(out)
	return out
}

// waitFleet waits until the router's workers are want (see fleet). The
// deadline bounds a hung test; it asserts nothing about speed.
func (c *cluster) waitFleet(want ...string) {
	c.t.Helper()
	want = sorted(want...)
	testutil.EventuallyState(c.t, testutil.Patience, fmt.Sprintf("the fleet to be %q", want), func() (bool, string) {
		got := c.fleet()
		return slices.Equal(got, want), fmt.Sprintf("%q", got)
	})
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func url(s *sim.Process) string { return "grpc://" + s.Addr() }

// generate sends one request through the router and reads it to the end.
func (c *cluster) generate(ctx context.Context) (worker string, err error) {
	stream, err := c.router.Generate(ctx, &kvgatev1.GenerateRequest{
		InputIds:       []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto.Uint32(4), IgnoreEos: true},
	})
	if err != nil {
		return "", err
	}
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			return worker, nil
		}
		if err != nil {
			return "", err
		}
		if done := res.GetComplete(); done != nil {
			worker = done.GetWorker()
		}
	}
}

// traffic sends requests without pause until stop is called, which
// returns how many were sent and the errors.
func (c *cluster) traffic() (stop func() (int, []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		errs []error
		n    int
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.generate(context.Background())
				mu.Lock()
				n++
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	return func() (int, []error) {
		cancel()
		wg.Wait()
		return n, errs
	}
}

// Pods join when Running and Ready and leave, drained, when they stop being
// Ready, are deleted or change address, while requests keep flowing through
// every change: a pod that stays Ready throughout carries the traffic, and
// no request fails.
//
// It runs with one model and with many (--enable-igw, which kvgate serve
// --service-discovery turns on).
func TestPodLifecycle(t *testing.T) {
	for _, igw := range []bool{false, true} {
		t.Run(fmt.Sprintf("igw=%v", igw), func(t *testing.T) { testPodLifecycle(t, clusterOptions{igw: igw}) })
	}
}

func testPodLifecycle(t *testing.T, o clusterOptions) {
	c := startCluster(t, o)
	sel := map[string]string{"app": "engine"}
	e0, e1, e2 := engine(t, sim.RoleRegular), engine(t, sim.RoleRegular), engine(t, sim.RoleRegular)
	stranger := engine(t, sim.RoleRegular)

	c.create(podOf("stable", e0, true, sel))
	c.waitFleet("regular " + url(e0))
	stop := c.traffic()

	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"a pod appears, not Ready yet: it waits", func() { c.create(podOf("p1", e1, false, sel)) },
			[]string{"regular " + url(e0)}},
		{"a pod of other labels is not ours", func() { c.create(podOf("other", stranger, true, map[string]string{"app": "web"})) },
			[]string{"regular " + url(e0)}},
		{"the pod becomes Ready: it joins", func() { c.update(podOf("p1", e1, true, sel)) },
			[]string{"regular " + url(e0), "regular " + url(e1)}},
		{"the pod fails readiness: it is drained and removed", func() { c.update(podOf("p1", e1, false, sel)) },
			[]string{"regular " + url(e0)}},
		{"Ready again: it joins again", func() { c.update(podOf("p1", e1, true, sel)) },
			[]string{"regular " + url(e0), "regular " + url(e1)}},
		{"its address changes (a restart on another port): the old worker leaves, the new one joins",
			func() { c.update(podOf("p1", e2, true, sel)) },
			[]string{"regular " + url(e0), "regular " + url(e2)}},
		{"the pod is being deleted: it leaves at once", func() {
			p := podOf("p1", e2, true, sel)
			now := metav1.Now()
			p.DeletionTimestamp = &now
			c.update(p)
		}, []string{"regular " + url(e0)}},
		{"the pod is deleted", func() { c.delete("p1") }, []string{"regular " + url(e0)}},
		{"a pod created Ready joins", func() { c.create(podOf("p2", e1, true, sel)) },
			[]string{"regular " + url(e0), "regular " + url(e1)}},
	}
	for _, s := range steps {
		s.do()
		c.waitFleet(s.want...)
		// Let traffic run on the new fleet before the next change.
		for range 3 {
			if _, err := c.generate(context.Background()); err != nil {
				t.Fatalf("after %q: %v", s.name, err)
			}
		}
	}
	n, errs := stop()
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed while the pods changed; first: %v", len(errs), n, errs[0])
	}
	if n < len(steps) {
		t.Errorf("only %d requests were sent: the traffic did not run", n)
	}
}

// With PD, the prefill and decode selectors give the pods their roles, a
// prefill pod's bootstrap port comes from its annotation (SGLang's router's
// name accepted), a pod matching both selectors joins as neither, and
// requests are served by a prefill and a decode worker throughout.
func TestPDRolesBySelector(t *testing.T) {
	c := startCluster(t, clusterOptions{pd: true})
	pre, dec, dec2 := engine(t, sim.RolePrefill), engine(t, sim.RoleDecode), engine(t, sim.RoleDecode)
	both := engine(t, sim.RoleDecode)

	p := podOf("prefill-0", pre, true, prefillSel)
	p.Annotations[discovery.SGLangBootstrapPortAnnotation] = strconv.Itoa(pre.Engine().BootstrapPort())
	c.create(p)
	c.create(podOf("decode-0", dec, true, decodeSel))
	c.create(podOf("confused", both, true, map[string]string{"prefill": "yes", "decode": "yes"}))
	c.waitFleet("prefill "+url(pre), "decode "+url(dec))
	// The confused pod never joins; were it to, it would be by now (it was
	// created before the pods the fleet waited for).
	if _, err := c.generate(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.waitFleet("prefill "+url(pre), "decode "+url(dec))

	stop := c.traffic()
	c.create(podOf("decode-1", dec2, true, decodeSel))
	c.waitFleet("prefill "+url(pre), "decode "+url(dec), "decode "+url(dec2))
	c.delete("decode-0")
	c.waitFleet("prefill "+url(pre), "decode "+url(dec2))
	for range 3 {
		if _, err := c.generate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	n, errs := stop()
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed while the decode pods changed; first: %v", len(errs), n, errs[0])
	}
}

// A pod that the fleet refuses (its address is already a worker, given by
// --worker-urls) is retried with backoff, logged once rather than at every
// attempt, and joins once the address is free instead of being forgotten.
func TestRefusedPodIsRetried(t *testing.T) {
	e := engine(t, sim.RoleRegular)
	var log testutil.Buffer
	c := startCluster(t, clusterOptions{static: []string{url(e)}, retries: 10 * time.Millisecond, log: &log})
	c.create(podOf("p", e, true, map[string]string{"app": "engine"}))
	const refused = `msg="pod not added to the fleet; retrying with backoff"`
	testutil.Eventually(t, "the pod's first refusal", func() bool { return strings.Contains(log.String(), refused) })
	// Several more attempts (10, 20, 40, 80 ms apart) are refused meanwhile;
	// the line that reports the join says how many there were.
	testutil.Never(t, "the refusal was logged again", 200*time.Millisecond, func() bool { return strings.Count(log.String(), refused) > 1 })
	c.waitFleet("regular " + url(e))
	if _, _, err := c.g.RemoveWorker(context.Background(), url(e), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The static worker is gone; discovery's next attempt adds the pod's.
	c.waitFleet("regular " + url(e))
	testutil.Eventually(t, "the join after the refusals", func() bool { return strings.Contains(log.String(), "pod added after being refused") })
	m := regexp.MustCompile(`pod added after being refused.* attempts=(\d+)`).FindStringSubmatch(log.String())
	if attempts, err := strconv.Atoi(m[1]); err != nil || attempts < 3 {
		t.Errorf("the pod joined after %s attempts, want several: the once-only refusal line is untested otherwise\n%s", m[1], log.String())
	}
	if n := strings.Count(log.String(), refused); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, log.String())
	}
	c.delete("p")
	c.waitFleet()
}

// After a dropped watch, the informers list the pods again; pods deleted
// and added while the watch was down are removed and added.
func TestRelistAfterDroppedWatch(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	sel := map[string]string{"app": "engine"}
	e0, e1, e2 := engine(t, sim.RoleRegular), engine(t, sim.RoleRegular), engine(t, sim.RoleRegular)
	c.create(podOf("p0", e0, true, sel))
	c.create(podOf("p1", e1, true, sel))
	c.waitFleet("regular "+url(e0), "regular "+url(e1))

	// Drop the watch and make the API unreachable, so that nothing is
	// seen until the informer lists again. The fake API replays nothing
	// to a new watch, so only that list can bring the changes.
	c.failWatch.Store(true)
	c.dropWatches()
	c.delete("p1")
	c.create(podOf("p2", e2, true, sel))
	// The informers try to see the API again and are refused: they are
	// blind meanwhile.
	testutil.Eventually(t, "an informer refused by the API", func() bool { return c.refused.Load() > 0 })
	if got, want := c.fleet(), sorted("regular "+url(e0), "regular "+url(e1)); !slices.Equal(got, want) {
		t.Fatalf("fleet changed while the watch was down: %q (the test's watch reactor did not take effect)", got)
	}
	c.failWatch.Store(false)
	c.waitFleet("regular "+url(e0), "regular "+url(e2))
}

// fakePods is Config.Pods over client-go's fake clientset.
func fakePods(cs *fake.Clientset) func(string) discovery.PodClient {
	return func(ns string) discovery.PodClient { return listOnly{cs.CoreV1().Pods(ns)} }
}

// listOnly tells the informers that the fake API cannot stream a list
// through a watch, as the fake clientset itself tells client-go's.
type listOnly struct{ corev1client.PodInterface }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
