package discovery

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/kvgate/kvgate/workers"
)

// pod is a Running, Ready pod at 10.0.0.7 that tests then change.
func pod(change func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "llm", Annotations: map[string]string{}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if change != nil {
		change(p)
	}
	return p
}

func TestPodTarget(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name   string
		pod    *corev1.Pod
		role   workers.Role
		want   target // zero: does not join
		noteOf string // part of the note, "" for none
	}{
		{"ready", pod(nil), workers.RoleRegular, target{addr: "grpc://10.0.0.7:8000", pod: "llm/p"}, ""},
		{"IPv6", pod(func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }), workers.RoleRegular,
			target{addr: "grpc://[fd00::7]:8000", pod: "llm/p"}, ""},
		{"not Ready", pod(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }), workers.RoleRegular, target{}, ""},
		{"no Ready condition yet", pod(func(p *corev1.Pod) { p.Status.Conditions = nil }), workers.RoleRegular, target{}, ""},
		{"pending", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), workers.RoleRegular, target{}, ""},
		{"failed but still marked Ready", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), workers.RoleRegular, target{}, ""},
		{"no IP yet", pod(func(p *corev1.Pod) { p.Status.PodIP = "" }), workers.RoleRegular, target{}, ""},
		{"terminating", pod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), workers.RoleRegular, target{}, ""},
		{"port annotation", pod(func(p *corev1.Pod) { p.Annotations[PortAnnotation] = "31000" }), workers.RoleRegular,
			target{addr: "grpc://10.0.0.7:31000", pod: "llm/p"}, ""},
		{"bad port annotation", pod(func(p *corev1.Pod) { p.Annotations[PortAnnotation] = "http" }), workers.RoleRegular,
			target{}, "kvgate.io/port"},
		{"prefill with kvgate's bootstrap annotation", pod(func(p *corev1.Pod) { p.Annotations[BootstrapPortAnnotation] = "8998" }),
			workers.RolePrefill, target{addr: "grpc://10.0.0.7:8000", role: workers.RolePrefill, bootstrap: 8998, pod: "llm/p"}, ""},
		{"prefill with SGLang's bootstrap annotation", pod(func(p *corev1.Pod) { p.Annotations[SGLangBootstrapPortAnnotation] = "9000" }),
			workers.RolePrefill, target{addr: "grpc://10.0.0.7:8000", role: workers.RolePrefill, bootstrap: 9000, pod: "llm/p"}, ""},
		{"kvgate's bootstrap annotation wins", pod(func(p *corev1.Pod) {
			p.Annotations[SGLangBootstrapPortAnnotation], p.Annotations[BootstrapPortAnnotation] = "9000", "8998"
		}), workers.RolePrefill, target{addr: "grpc://10.0.0.7:8000", role: workers.RolePrefill, bootstrap: 8998, pod: "llm/p"}, ""},
		{"bad bootstrap annotation", pod(func(p *corev1.Pod) { p.Annotations[BootstrapPortAnnotation] = "70000" }),
			workers.RolePrefill, target{}, "kvgate.io/bootstrap-port"},
		{"a decode pod's bootstrap annotation is not its business", pod(func(p *corev1.Pod) { p.Annotations[BootstrapPortAnnotation] = "8998" }),
			workers.RoleDecode, target{addr: "grpc://10.0.0.7:8000", role: workers.RoleDecode, pod: "llm/p"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, note, ok := podTarget(tt.pod, tt.role, 8000, "grpc")
			if ok != (tt.want != target{}) || got != tt.want {
				t.Errorf("podTarget = %+v, %v; want %+v", got, ok, tt.want)
			}
			if (tt.noteOf == "") != (note == "") || !strings.Contains(note, tt.noteOf) {
				t.Errorf("note %q, want one naming %q", note, tt.noteOf)
			}
		})
	}
}

// desired reads the caches: a pod matching both PD selectors joins as
// neither, a pod outside its selector is ignored even if the API sent it,
// and two pods claiming one address give it to the first by name.
func TestDesired(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PD, cfg.Port = true, 8000
	cfg.Prefill, cfg.Decode = map[string]string{"prefill": "yes"}, map[string]string{"decode": "yes"}
	// The caches alone, without informers filling them from an API.
	w := &watches{sets: []selected{
		{role: workers.RolePrefill, sel: labels.SelectorFromSet(cfg.Prefill), store: cache.NewStore(cache.MetaNamespaceKeyFunc)},
		{role: workers.RoleDecode, sel: labels.SelectorFromSet(cfg.Decode), store: cache.NewStore(cache.MetaNamespaceKeyFunc)},
	}}
	named := func(name, ip string, lbls map[string]string) *corev1.Pod {
		return pod(func(p *corev1.Pod) { p.Name, p.Status.PodIP, p.Labels = name, ip, lbls })
	}
	add := func(s cache.Store, p *corev1.Pod) {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	prefill, decode := w.sets[0].store, w.sets[1].store
	add(prefill, named("p", "10.0.0.1", cfg.Prefill))
	add(decode, named("d", "10.0.0.2", cfg.Decode))
	both := named("both", "10.0.0.3", map[string]string{"prefill": "yes", "decode": "yes"})
	add(prefill, both)
	add(decode, both)
	add(decode, named("stranger", "10.0.0.4", map[string]string{"app": "web"}))
	add(decode, named("d2", "10.0.0.2", cfg.Decode))

	want, notes := w.desired(cfg)
	if len(want) != 2 || want["grpc://10.0.0.1:8000"].role != workers.RolePrefill || want["grpc://10.0.0.2:8000"].pod != "llm/d" {
		t.Errorf("desired %+v, want p as prefill and d as decode", want)
	}
	if !strings.Contains(notes["llm/both"], "both") || !strings.Contains(notes["llm/d2"], "llm/d") || len(notes) != 2 {
		t.Errorf("notes %q, want one for the pod matching both selectors and one for the duplicate address", notes)
	}
}

func TestConfigValidate(t *testing.T) {
	sel := map[string]string{"app": "engine"}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" valid
	}{
		{"regular", func(c *Config) { c.Regular = sel }, ""},
		{"PD", func(c *Config) {
			c.PD, c.Prefill, c.Decode = true, map[string]string{"role": "prefill"}, map[string]string{"role": "decode"}
		}, ""},
		{"no selector", func(*Config) {}, "--selector"},
		{"PD without decode", func(c *Config) { c.PD, c.Prefill = true, sel }, "--decode-selector"},
		{"PD with --selector", func(c *Config) { c.PD, c.Prefill, c.Decode, c.Regular = true, sel, map[string]string{"r": "d"}, sel }, "not --selector"},
		{"PD selectors equal", func(c *Config) { c.PD, c.Prefill, c.Decode = true, sel, map[string]string{"app": "engine"} }, "match both"},
		{"decode selector narrower", func(c *Config) {
			c.PD, c.Prefill, c.Decode = true, sel, map[string]string{"app": "engine", "role": "decode"}
		}, "--decode-selector has every label of --prefill-selector"},
		{"prefill selector narrower", func(c *Config) {
			c.PD, c.Prefill, c.Decode = true, map[string]string{"app": "engine", "role": "prefill"}, sel
		}, "--prefill-selector has every label of --decode-selector"},
		{"overlapping but distinct", func(c *Config) {
			c.PD, c.Prefill, c.Decode = true, map[string]string{"app": "engine", "role": "prefill"}, map[string]string{"app": "engine", "role": "decode"}
		}, ""},
		{"PD selectors without PD", func(c *Config) { c.Regular, c.Prefill = sel, sel }, "--pd-disaggregation"},
		{"bad label", func(c *Config) { c.Regular = map[string]string{"a b": "c"} }, "--selector"},
		{"port 0", func(c *Config) { c.Regular, c.Port = sel, 0 }, "--service-discovery-port"},
		{"port too big", func(c *Config) { c.Regular, c.Port = sel, 65536 }, "--service-discovery-port"},
		{"backoff inverted", func(c *Config) { c.Regular, c.RetryMax = sel, c.RetryMin/2 }, "backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := c.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseSelector(t *testing.T) {
	tests := []struct {
		in   []string
		want map[string]string
		err  string
	}{
		{[]string{"role=prefill"}, map[string]string{"role": "prefill"}, ""},
		{[]string{"app=llm", "tier=gpu"}, map[string]string{"app": "llm", "tier": "gpu"}, ""},
		{[]string{"app.kubernetes.io/name=sglang"}, map[string]string{"app.kubernetes.io/name": "sglang"}, ""},
		{[]string{"empty="}, map[string]string{"empty": ""}, ""},
		{[]string{"app=a", "app=a"}, map[string]string{"app": "a"}, ""},
		{[]string{"app=a", "app=b"}, nil, "twice"},
		{[]string{"role"}, nil, "not key=value"},
		{[]string{"=x"}, nil, "not key=value"},
		{[]string{"bad key=x"}, nil, "name part"},
	}
	for _, tt := range tests {
		got, err := ParseSelector(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSelector(%q) = %v, %v; want an error about %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("ParseSelector(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseSelector(%q)[%q] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

// With Config.TLS (--service-discovery-tls) pods are dialled as grpcs://.
func TestPodTargetSchemeFollowsTLS(t *testing.T) {
	for _, tc := range []struct {
		tls  bool
		want string
	}{{false, "grpc://10.0.0.7:8000"}, {true, "grpcs://10.0.0.7:8000"}} {
		got, _, ok := podTarget(pod(nil), workers.RoleRegular, 8000, Config{TLS: tc.tls}.scheme())
		if !ok || got.addr != tc.want {
			t.Errorf("TLS %v: %q, %v; want %q", tc.tls, got.addr, ok, tc.want)
		}
	}
}
